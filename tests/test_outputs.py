"""`import helpers` never fails on the environment; the first write that cannot happen says what to set."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import one_line

from helpers import paths

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, outputs: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSE_OUTPUTS": outputs, "PYTHONPATH": str(REPO)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def test_import_works_when_the_outputs_folder_cannot_be_made_and_the_first_write_says_why(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = (
        "import helpers\n"
        "try:\n"
        "    helpers.record(metrics={'x': 1.0}, notebook='n', experiment='e', variant='v')\n"
        "except OSError as exc:\n"
        "    print('refused:', exc)\n"
    )
    proc = _python(code, str(blocker / "outputs"))
    assert proc.returncode == 0, proc.stderr
    assert "refused: cannot write to" in proc.stdout
    assert "COURSE_OUTPUTS" in proc.stdout
    refused = proc.stdout.split("refused: ", 1)[1].strip()
    assert "\n" not in refused
    assert "COURSE_OUTPUTS" in proc.stderr  # the import's own one-line warning


def test_import_does_not_need_fcntl(tmp_path):
    code = (
        "import sys\nsys.modules['fcntl'] = None  # as on Windows\n"
        "import helpers\nhelpers.record(metrics={'x': 1.0}, notebook='n', experiment='e', variant='v')\n"
        "print(len(helpers.load_results()))\n"
    )
    proc = _python(code, str(tmp_path / "outputs"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"


def test_a_relative_outputs_folder_is_taken_from_the_repository_root(monkeypatch):
    monkeypatch.setenv("COURSE_OUTPUTS", "outputs/elsewhere")
    assert paths.outputs_dir() == REPO / "outputs" / "elsewhere"
    monkeypatch.chdir(REPO / "notebooks")  # a notebook's working directory: the same folder
    assert paths.outputs_dir() == REPO / "outputs" / "elsewhere"


def test_outputs_dir_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_OUTPUTS", str(tmp_path / "not-yet"))
    assert paths.outputs_dir() == tmp_path / "not-yet"
    assert not (tmp_path / "not-yet").exists()
    assert paths.output_subdir("traces").is_dir()


def test_ensure_dir_refuses_in_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(paths.OutputsNotWritable, match="COURSE_OUTPUTS") as info:
        paths.ensure_dir(blocker / "sub")
    assert one_line(info.value)


def test_atomic_path_renames_only_a_complete_file(tmp_path):
    from helpers.paths import atomic_path

    target = tmp_path / "model.onnx"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        assert tmp.suffix == ".onnx"
        assert tmp.parent == tmp_path
        tmp.write_text("half a fi")
        raise RuntimeError("interrupted mid-write")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".hidden", None, 3, "a\\b"])
def test_trace_and_export_names_cannot_leave_the_outputs_folder(name):
    import torch

    from helpers import onnxrt, profiling

    with pytest.raises(ValueError, match="name=") as info:
        profiling.record_trace(lambda: None, name)
    assert one_line(info.value)
    with pytest.raises(ValueError, match="name=") as info:
        onnxrt.export(torch.nn.Linear(2, 2), torch.randn(2, 2), name)
    assert one_line(info.value)
