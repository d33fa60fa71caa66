"""The README's reference table is generated from data/reference/ and must match it; each reference file
is well-formed and says where it came from."""

import json
import re
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
        assert env["environment"]["gpu"]
        assert env["environment"]["driver"]
        assert env["date"]
        assert env["packages"]["torch"]


def test_agenda_and_runtime_map_are_up_to_date():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "agenda.py"), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr


def test_every_notebook_has_measured_run_times():
    """On at least one of the course's 2-core CPU machines: a session gets one of them, and a new notebook is
    measured where it was written (the other columns show "–")."""
    envs = [json.loads(p.read_text())["notebooks"] for p in REFERENCE.glob("cpu-*2cpu*.env.json")]
    assert len(envs) >= 2
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        measured = [env.get(path.stem, {}) for env in envs]
        assert any(t.get("quick_seconds", 0) > 0 and t.get("full_seconds", 0) > 0 for t in measured), (
            f"{path.stem}: measure its quick and full run times (scripts/runtimes.py --write) into the .env.json"
        )


def test_each_reference_file_is_named_by_the_id_of_the_features_it_records():
    """A CPU's machine id names the features that decide results: a file's name, its environment's id and the id
    its recorded features give all agree, so no figure of one host sits under another's id."""
    from helpers.device import feature_tags

    for path in REFERENCE.glob("cpu-*.env.json"):
        env = json.loads(path.read_text())
        machine = path.name.removesuffix(".env.json")
        assert env["machine_id"] == env["environment"]["machine_id"] == machine
        assert machine.endswith("cpu" + "".join("-" + t for t in feature_tags(env["environment"]["cpu_features"])))
        assert not any("host" in entry for entry in env["notebooks"].values()), path.name


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


def test_the_run_time_map_has_a_column_per_machine_id(monkeypatch, tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    import agenda

    for machine, seconds in (("cpu-x-2cpu-avx2", 36.0), ("cpu-x-2cpu-avx512-amx", 12.0)):
        env = {"machine_id": machine, "environment": {"cpu": "X", "usable_cpus": 2}}
        env["notebooks"] = {"09_capstone": {"quick_seconds": seconds, "full_seconds": 100.0}}
        (tmp_path / f"{machine}.env.json").write_text(json.dumps(env))
    monkeypatch.setattr(agenda, "REFERENCE", tmp_path)
    monkeypatch.setattr(agenda, "notebooks", lambda: ["09_capstone"])
    table = agenda.runtime_table()
    assert "X, 2 CPUs, AVX2 |" in table.splitlines()[0]
    assert "X, 2 CPUs, AVX512 AMX |" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("| 09 "))
    assert "36 s / 2 min" in row
    assert "12 s / 2 min" in row


def test_runtimes_write_this_runs_environment(tmp_path):
    import runtimes

    def summary(features):
        env = {"machine_id": "cpu-x", "cpu": "X", "usable_cpus": 2, "cpu_features": features}
        return {"environment": env, "notebooks": {"00_a": {"status": "ok", "seconds": 12.0}}}

    avx2 = {"capability": "AVX2"}
    path = runtimes.write_runtimes(summary(avx2), "quick", reference=tmp_path)
    runtimes.write_runtimes(summary(avx2), "full", reference=tmp_path)
    data = json.loads(path.read_text())
    assert data["environment"]["cpu_features"] == avx2
    assert data["notebooks"]["00_a"] == {"quick_seconds": 12.0, "full_seconds": 12.0}


def test_teaching_states_no_total_of_its_own_and_each_day_fits_its_sessions():
    """TEACHING.md's hand-written prose gives no course total (the generated table's is the one: a "13–17 h"
    once sat above a 28 h table), and every agenda's notebooks fit the minutes of its day."""
    sys.path.insert(0, str(REPO / "scripts"))
    import agenda as ag

    text = (REPO / "TEACHING.md").read_text(encoding="utf-8")
    prose = text.split("<!-- agenda:start -->")[0] + text.split("<!-- agenda:end -->")[1]
    totals = re.findall(r"\d+(?:[.,]\d+)?\s*(?:[–-]\s*\d+(?:[.,]\d+)?\s*)?(?:h|hours)\b(?! of)", prose)
    assert not totals, f"TEACHING.md states hours by hand: {totals}; the agenda's table gives the total"
    half = ag.pack(ag.HALF_DAY, "cpu", ag.HALF_DAY_SESSION_MINUTES, exercises=False)[0]
    full = ag.pack(ag.HALF_DAY, "gpu", ag.FULL_DAY_SESSION_MINUTES, exercises=False)[0]
    assert sum(ag.slot(n, "cpu", exercises=False) for n in half) <= ag.HALF_DAY_SESSION_MINUTES
    assert sum(ag.slot(n, "gpu", exercises=False) for n in full) <= ag.FULL_DAY_SESSION_MINUTES
    assert len(full) > len(half), "a full day holds more of the core than a half day"
    for day in ag.pack(ag.notebooks(), "gpu", ag.FULL_DAY_SESSION_MINUTES):
        assert len(day) == 1 or sum(ag.slot(n, "gpu") for n in day) <= ag.FULL_DAY_SESSION_MINUTES, day
