#!/usr/bin/env bash
# One prepared full-mode run of every notebook on a GPU machine, for the reference results (issue: GPU references).
#
#   scripts/reference_run.sh OUT [TOTAL_SECONDS] [full_run.py options…]
#
# Runs scripts/full_run.py with the interpreter on PATH (python3: a GPU image's own torch), in a Jupyter kernel
# (the carried wheels of scripts/gpu-wheels.txt; the plain executor only if they are missing), work files in
# /tmp so that only a few files come back, and a total time limit after which whatever was measured is still
# collected. Leaves under OUT: results.jsonl (every record made, also
# after a timeout), summary.json (environment + per-notebook status, also after a timeout), environment.txt
# (nvidia-smi, package versions), executed.tgz (the executed notebooks) and log.txt.
set -u
out=${1:?usage: scripts/reference_run.sh OUT [TOTAL_SECONDS] [full_run.py options]}
total=${2:-1500}
shift $(( $# >= 2 ? 2 : 1 ))
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${COURSE_WORK:-/tmp/course-work}
py=${PYTHON:-python3}
mkdir -p "$out"
# The wheels a machine without Jupyter needs (scripts/gpu-wheels.txt, downloaded by scripts/gpu_wheels.sh into
# .whl and carried): installed beside the image's own packages, so the notebooks run in a Jupyter kernel.
if [ -d "$repo/.whl" ] && ! "$py" -c "import papermill, nbclient, ipykernel" 2>/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$repo"/.whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# (an earlier run's results in $work are moved aside by full_run.py, never deleted)
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1 || true
  "$py" - <<'PY' 2>&1
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "torchvision", "torchao", "onnx", "onnxscript", "onnxruntime", "triton", "numpy", "pandas",
             "matplotlib", "psutil", "pynvml", "nbclient", "ipykernel", "tqdm", "PIL"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:  # a missing package is reported, and the notebooks skip what needs it
        print(name, "missing:", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
PY
} > "$out/environment.txt"
cat "$out/environment.txt"
PYTHONUNBUFFERED=1 timeout --signal=INT --kill-after=20 "$total" \
  "$py" "$repo/scripts/full_run.py" "$out/run" --work "$work" "$@" 2>&1 | tee "$out/log.txt"
status=${PIPESTATUS[0]}
# Collect what was measured even if the run was cut short: full_run.py merges the results (skipping a torn line)
# and writes summary.json when interrupted too; if it was killed outright, its merge is run here on the raw files
# (never a plain concatenation: a torn last line would swallow the next file's first record).
if [ -f "$out/run/results.jsonl" ]; then
  mv "$out/run/results.jsonl" "$out/results.jsonl"
else
  "$py" -c 'import sys; from pathlib import Path; sys.path[:0] = [sys.argv[1], sys.argv[1] + "/scripts"]
from full_run import merge_results
merge_results([Path(f) for f in sys.argv[3:] if Path(f).is_file()], Path(sys.argv[2]))' \
    "$repo" "$out/results.jsonl" "$work"/results/*.jsonl || : > "$out/results.jsonl"
fi
[ -f "$out/run/summary.json" ] && mv "$out/run/summary.json" "$out/summary.json"
[ -d "$out/run/executed" ] && tar -C "$out/run" -czf "$out/executed.tgz" executed
rm -rf "$out/run"
echo "reference run exit status $status; $(wc -l < "$out/results.jsonl") records in $out/results.jsonl"
exit "$status"
