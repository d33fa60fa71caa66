"""The README's reference table is generated from data/reference/ and must match it; each reference file
is well-formed and says where it came from."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "data" / "reference"


def test_readme_reference_table_is_up_to_date():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "reference_table.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_reference_file_is_full_mode_from_one_machine_with_versions():
    files = sorted(REFERENCE.glob("*.jsonl"))
    assert files
    for path in files:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        assert records, path.name
        assert {r["machine_id"] for r in records} == {path.stem}, path.name
        assert {r["mode"] for r in records} == {"full"}, path.name
        assert all(r["versions"]["torch"] for r in records), path.name


def test_gpu_references_say_which_gpu_driver_and_date():
    for path in REFERENCE.glob("cuda-*.jsonl"):
        env = json.loads(path.with_suffix(".env.json").read_text())
        assert env["machine_id"] == path.stem
        assert env["environment"]["gpu"] and env["environment"]["driver"] and env["date"]
        assert env["packages"]["torch"]


def test_agenda_and_runtime_map_are_up_to_date():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "agenda.py"), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr


def test_every_notebook_has_measured_run_times():
    """On at least one of the course's two 2-core CPU machines (the CI Xeon, the AVX2-only EPYC): a session
    gets one of them, and a new notebook is measured where it was written (the other column shows "–")."""
    envs = [
        json.loads((REFERENCE / f"{machine}.env.json").read_text())["notebooks"]
        for machine in ("cpu-intel-xeon-2cpu", "cpu-amd-epyc-2cpu")
    ]
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        measured = [env.get(path.stem, {}) for env in envs]
        assert any(t.get("quick_seconds", 0) > 0 and t.get("full_seconds", 0) > 0 for t in measured), (
            f"{path.stem}: measure its quick and full run times (scripts/runtimes.py --write) into the .env.json"
        )


def test_the_table_reads_results_with_the_tolerant_loader(tmp_path):
    import warnings

    sys.path.insert(0, str(REPO / "scripts"))
    from reference_table import load

    path = tmp_path / "cpu-x.jsonl"
    path.write_text('{"notebook": "00"}\n{"notebook": "0')  # a torn last line
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load(path) == [{"notebook": "00"}]
    assert any("incomplete" in str(w.message) for w in caught)


def test_a_run_time_from_another_host_is_marked_with_its_line(monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    import agenda

    host = "measured on a host that reports the same machine id"
    tables = {
        agenda.CPU: {},
        agenda.GPU: {},
        agenda.CPU_NO_AVX512: {"09_capstone": {"quick_seconds": 36.0, "full_seconds": 100.0, "host": host}},
    }
    monkeypatch.setattr(agenda, "runtimes", lambda machine: tables[machine])
    table = agenda.runtime_table()
    row = next(line for line in table.splitlines() if line.startswith("| 09 "))
    assert "36 s / 2 min¹" in row
    assert table.splitlines()[-1] == f"¹ {host}"


def test_runtimes_from_another_host_keep_the_files_environment(tmp_path):
    import runtimes

    def summary(features):
        env = {"machine_id": "cpu-x", "cpu": "X", "usable_cpus": 2, "cpu_features": features}
        return {"environment": env, "notebooks": {"00_a": {"status": "ok", "seconds": 12.0}}}

    avx2, avx512 = {"capability": "AVX2"}, {"capability": "AVX512", "vnni": True}
    path = runtimes.write_runtimes(summary(avx2), "quick", reference=tmp_path)
    runtimes.write_runtimes(summary(avx512), "full", reference=tmp_path)
    data = json.loads(path.read_text())
    assert data["environment"]["cpu_features"] == avx2  # the file still describes its own host
    entry = data["notebooks"]["00_a"]
    assert entry["full_seconds"] == 12.0 and "AVX512 (vnni)" in entry["host"]
    runtimes.write_runtimes(summary(avx2), "full", reference=tmp_path)  # measured again on the file's own host
    assert "host" not in json.loads(path.read_text())["notebooks"]["00_a"]
