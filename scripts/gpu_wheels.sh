#!/usr/bin/env bash
# Download the wheels of scripts/gpu-wheels.txt into DIR (default .whl, ignored by git) for the GPU machine
# (Python 3.12, x86-64, no Jupyter, no network), and with --check prove here that they are enough: a Python 3.12
# venv holding only what that image has (the list's header) plus these wheels, installed --no-deps, passes
# `pip check` and runs a notebook through scripts/execute.py in a Jupyter kernel.
#
#   scripts/gpu_wheels.sh [DIR] [--check]
# On the GPU machine (the device tool's README):
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site DIR/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$repo/.whl}
[ "${1:-}" = "--check" ] && dir=$repo/.whl
check=0; for a in "$@"; do [ "$a" = "--check" ] && check=1; done
py=${PYTHON:-python3}
mkdir -p "$dir"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d "$dir" -r "$repo/scripts/gpu-wheels.txt"
echo "$(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1) in $dir"
[ "$check" = 1 ] || exit 0
py312=${PYTHON312:-$(command -v python3.12)} || { echo "--check needs python3.12 (set PYTHON312)"; exit 2; }
venv=$(mktemp -d)/venv
"$py312" -m venv "$venv"
# what the image already has (gpu-wheels.txt's header), from the registry here
image="aiohttp attrs certifi charset-normalizer click idna packaging psutil pygments python-dateutil pyyaml requests tqdm
       typing-extensions urllib3"
"$venv/bin/pip" install --quiet $image
"$venv/bin/pip" install --quiet --no-index --no-deps "$dir"/*.whl
"$venv/bin/pip" check
"$venv/bin/python" - "$repo" <<'PY'
import sys, tempfile, pathlib, nbformat
sys.path.insert(0, sys.argv[1] + "/scripts")
from execute import execute, stderr_lines
nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell("import sys, ipywidgets, papermill\nfrom tqdm.auto import tqdm\nfor _ in tqdm(range(3)): pass\nprint(sys.version.split()[0])")]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
tmp = pathlib.Path(tempfile.mkdtemp())
nbformat.write(nb, tmp / "probe.ipynb")
run = execute(tmp / "probe.ipynb", tmp / "out.ipynb", timeout=120)
assert run.status == "ok", run.error
assert not stderr_lines(run.notebook), stderr_lines(run.notebook)  # tqdm.auto drew a widget, not stderr text
print("kernel path works on Python", run.notebook.cells[0].outputs[-1]["text"].strip(), "with only these wheels")
PY
