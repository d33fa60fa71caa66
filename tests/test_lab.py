"""`make lab` really serves the notebooks: start it headless on a free port, query the API, stop it."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_make_lab_serves_the_notebooks(tmp_path):
    port, token = _free_port(), "course-test-token"
    args = f"--no-browser --ip=127.0.0.1 --IdentityProvider.token={token} --ServerApp.runtime_dir={tmp_path}"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    log = tmp_path / "lab.log"  # a file, not a pipe: a pipe nobody reads would block the server once full
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            ["make", "--no-print-directory", "lab", f"PORT={port}", f"LAB_ARGS={args}"],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline, status = time.time() + 90, None
        while time.time() < deadline and proc.poll() is None:
            try:
                status = _get(f"{base}/api/status?token={token}")
                break
            except OSError:
                time.sleep(0.5)
        assert status is not None, "JupyterLab did not answer:\n" + log.read_text(errors="replace")[-4000:]
        listing = _get(f"{base}/api/contents/?token={token}")
        names = {item["name"] for item in listing["content"]}
        assert "00_environment.ipynb" in names
        lab_page = urllib.request.urlopen(f"{base}/lab?token={token}", timeout=10)
        assert lab_page.status == 200
        kernels = _get(f"{base}/api/kernelspecs?token={token}")
        assert "python3" in kernels["kernelspecs"]
        # no "fetch news?" prompt: the course's jupyter/overrides.json, installed by make setup, turns it off
        plugin = _get(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}")
        defaults = {k: v.get("default") for k, v in plugin["schema"]["properties"].items()}
        assert defaults["fetchNews"] == "false", defaults
        assert defaults["checkForUpdates"] is False, defaults
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
