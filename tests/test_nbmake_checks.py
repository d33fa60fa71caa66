"""The checks conftest.py adds to nbmake (make test-notebooks) really fail a notebook that breaks them, and keep its
executed copy: four tiny notebooks, one clean, one writing an unexplained line to stderr, one raising, one leaving a
serving engine's process running (a copy of `sleep` named `raylet`); another run's engine is not blamed on them."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import psutil

REPO = Path(__file__).resolve().parents[1]


def notebook(path: Path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_nbmake_runs_keep_copies_and_fail_on_unexplained_stderr(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    figure = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])"
    notebook(folder / "00_ok.ipynb", "x = 1 + 1\nprint(x)", figure)
    notebook(folder / "01_noise.ipynb", "import sys\nprint('a message nobody explains', file=sys.stderr)")
    notebook(folder / "02_broken.ipynb", "print('before')", "raise ValueError('broken on purpose')")
    raylet = shutil.copy(shutil.which("sleep"), tmp_path / "raylet")  # psutil names it raylet: an engine's process
    left = f"import subprocess\nsubprocess.Popen([{str(raylet)!r}, '120'], start_new_session=True)"
    notebook(folder / "03_engine.ipynb", left)
    outputs = tmp_path / "outputs"
    env = {**os.environ, "COURSE_OUTPUTS": str(outputs), "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    # the root conftest.py as a plugin: these notebooks live outside the repository, where pytest would not find it
    others = subprocess.Popen([raylet, "120"])  # another run's engine, started during this one: not theirs
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbmake", "--nbmake-timeout=60", "-p", "conftest", "-p", "no:cacheprovider"]
        + [str(folder)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    others.kill()
    others.wait()
    for p in psutil.process_iter(["name", "exe"]):  # the notebook's own, detached
        if p.info["name"] == "raylet" and p.info["exe"] == str(raylet):
            os.kill(p.pid, signal.SIGKILL)
    text = run.stdout + run.stderr
    assert run.returncode == 1, text  # tests failed (not a usage or internal error)
    assert "course notebooks: mode" in text, text  # the root conftest.py was loaded
    assert "1 passed" in text, text
    assert "3 failed" in text, text
    assert "03_engine.ipynb left a serving engine's processes running: ['raylet" in text, text
    assert "01_noise.ipynb wrote to stderr what no notebook up to it explains" in text, text
    assert "a message nobody explains" in text, text
    assert "broken on purpose" in text, text
    for name, status in [("00_ok", "ok"), ("01_noise", "ok"), ("02_broken", "failed"), ("03_engine", "ok")]:
        kept = json.loads((outputs / "executed" / f"{name}.ipynb").read_text())
        assert kept["metadata"]["course"]["status"] == status, name
    ok = json.loads((outputs / "executed" / "00_ok.ipynb").read_text())
    assert any("image/png" in out.get("data", {}) for out in ok["cells"][1]["outputs"])  # inline, not Agg
    broken = nbformat.read(outputs / "executed" / "02_broken.ipynb", as_version=4)
    assert broken.cells[0].outputs[0].text == "before\n"  # what ran before the error is kept
    assert not list((outputs / "executed").glob(".*partial*"))
