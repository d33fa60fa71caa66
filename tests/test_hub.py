"""The course's JupyterHub (hub/jupyterhub_config.py), end to end on this machine: started on free ports of
127.0.0.1, two participants log in with the day's secret (a wrong one is refused), their servers are spawned as
their own Unix accounts, each sees the course notebooks, gets its own device and outputs folder, cannot read or
write the other's, runs a cell in its kernel; an idle server is culled; stopping the hub leaves no process.

Needs root (participants are real Unix accounts: the only way one participant cannot read another's files) and
the proxy that `make setup` installs with npm; otherwise skipped, saying which."""

from __future__ import annotations

import asyncio
import gc
import grp
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from helpers.serving import listeners

REPO = Path(__file__).resolve().parents[1]
HUB = REPO / ".venv" / "bin" / "jupyterhub"
PROXY = REPO / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
USERS = ("hubtesta", "hubtestb")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="participants are Unix accounts: creating them needs root"),
    pytest.mark.skipif(not PROXY.exists(), reason="no configurable-http-proxy: `make setup` installs it with npm"),
    pytest.mark.skipif(not HUB.exists(), reason="no jupyterhub in .venv: run `make setup`"),
]


def _free_ports(n: int) -> list[int]:
    """n consecutive free ports on 127.0.0.1 (the proxy's API port is the hub API's + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        try:
            probes = [socket.socket() for _ in range(n)]
            for i, p in enumerate(probes):
                p.bind(("127.0.0.1", base + i))
            return list(range(base, base + n))
        except OSError:
            continue
        finally:
            for p in probes:
                p.close()
    raise RuntimeError("no consecutive free ports")


def _remove_users() -> None:
    for name in USERS:
        for p in psutil.process_iter(["username"]):
            if p.info["username"] == name:
                p.kill()
        subprocess.run(["userdel", "--remove", name], capture_output=True)


@pytest.fixture
def reachable():
    """This machine's Python may live under /root (pyenv), which participants cannot enter: open the folders on
    the way for traversal only (o+x, no listing) for the test, and close them again. (The hub itself refuses to
    start in that case, naming the folder: `closed_to_others`, tested below.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hub_config_probe", REPO / "hub" / "_paths.py")
    paths = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paths)
    opened = []
    for needed, read in (
        (REPO / ".venv" / "bin" / "python", False),
        (REPO / "notebooks", True),
        (REPO / "helpers", True),
    ):
        while (closed := paths.closed_to_others(needed, read=read)) is not None:
            assert closed.is_dir(), f"{closed} itself is not readable by other users: fix its mode"
            opened.append((closed, os.stat(closed).st_mode))
            os.chmod(closed, os.stat(closed).st_mode | 0o001)
    yield
    for folder, mode in reversed(opened):
        os.chmod(folder, mode)


@pytest.fixture
def hub(tmp_path, reachable):
    import tempfile

    _remove_users()
    warm = Path(tempfile.mkdtemp())  # a warm cache participants can read (pytest's tmp_path is private to root)
    os.chmod(warm, 0o755)
    (warm / "kernel.so").write_text("a pre-compiled kernel")
    os.chmod(warm / "kernel.so", 0o644)
    group_existed = any(g.gr_name == "course" for g in grp.getgrall())
    port, api_port, _ = _free_ports(3)
    token = secrets.token_hex(16)
    config = tmp_path / "test_config.py"
    config.write_text(
        f"""
load_subconfig({str(REPO / "hub" / "jupyterhub_config.py")!r})
c.Spawner.environment = {{"JUPYTERHUB_ACTIVITY_INTERVAL": "2"}}  # report activity often: culling is timely
c.JupyterHub.last_activity_interval = 2
c.JupyterHub.services.append({{"name": "course-test", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{"name": "course-test", "services": ["course-test"],
    "scopes": ["admin:users", "admin:servers", "access:servers", "list:users", "read:users"]}})
"""
    )
    env = {
        **os.environ,
        "COURSE_HUB_PASSWORD": "the-day-secret",
        "COURSE_HUB_PORT": str(port),
        "COURSE_HUB_API_PORT": str(api_port),
        "COURSE_HUB_STATE": str(tmp_path / "state"),
        "COURSE_HUB_GPUS": "0,1",
        "COURSE_HUB_IDLE": "12",
        "COURSE_HUB_WARM_CACHE": str(warm),
    }
    log = open(tmp_path / "hub.log", "w")  # noqa: SIM115 (closed below)
    started = time.time()
    proc = subprocess.Popen([str(HUB), "-f", str(config)], cwd=tmp_path, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    import requests

    try:
        for _ in range(120):
            try:
                if requests.get(f"{base}/hub/api/", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, (tmp_path / "hub.log").read_text()[-3000:]
            time.sleep(0.5)
        else:
            raise AssertionError("the hub did not answer in 60 s:\n" + (tmp_path / "hub.log").read_text()[-3000:])
        yield {"base": base, "token": token, "proc": proc, "log": tmp_path / "hub.log", "started": started}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        _remove_users()
        shutil.rmtree(warm)
        if not group_existed:
            subprocess.run(["groupdel", "course"], capture_output=True)


def _login(base: str, name: str, password: str):
    import requests

    session = requests.Session()
    session.get(f"{base}/hub/login", timeout=10)
    xsrf = session.cookies.get("_xsrf")
    reply = session.post(
        f"{base}/hub/login",
        data={"username": name, "password": password, "_xsrf": xsrf},
        allow_redirects=False,
        timeout=30,
    )
    return session, reply


async def _run_cell(base: str, name: str, token: str, code: str) -> str:
    """Start a kernel in `name`'s server, run `code`, return what it printed (through the server's websocket)."""
    import requests
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    headers = {"Authorization": f"token {token}"}
    kernel = requests.post(f"{base}/user/{name}/api/kernels", headers=headers, json={}, timeout=60).json()
    url = f"{base.replace('http', 'ws')}/user/{name}/api/kernels/{kernel['id']}/channels"
    ws = await websocket_connect(HTTPRequest(url, headers=headers))
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "username": name,
        "session": uuid.uuid4().hex,
        "version": "5.3",
    }
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False}
    ws.write_message(
        json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"})
    )
    printed = []
    deadline = time.time() + 180  # a cold kernel importing torch for a new user, two at once on 2 cores
    while time.time() < deadline:
        msg = json.loads(await asyncio.wait_for(ws.read_message(), timeout=max(1.0, deadline - time.time())))
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    else:
        raise AssertionError(f"{name}'s cell did not finish within 180 s; it printed: {''.join(printed)!r}")
    ws.close()
    while await asyncio.wait_for(ws.read_message(), timeout=10) is not None:  # until the server closes it too
        pass
    return "".join(printed)


CELL = """
import json, os, pwd
other = {other!r}
def attempt(action):
    try:
        action()
        return "allowed"
    except PermissionError:
        return "denied"
import torch, helpers  # what a participant's kernel holds once a notebook starts
print(json.dumps({{
    "user": pwd.getpwuid(os.getuid()).pw_name,
    "device": os.environ["CUDA_VISIBLE_DEVICES"],
    "outputs": os.environ["COURSE_OUTPUTS"],
    "threads": os.environ["OMP_NUM_THREADS"],
    "warm cache": os.path.exists(os.path.join(os.environ["COURSE_OUTPUTS"], "inductor-cache", "kernel.so")),
    "read other": attempt(lambda: os.listdir(other)),
    "write other": attempt(lambda: open(os.path.join(other, "x.txt"), "w").close()),
    "write own": attempt(lambda: open(os.path.join(os.environ["COURSE_OUTPUTS"], "x.txt"), "w").close()),
}}))
"""


def test_two_participants_get_isolated_servers_and_an_idle_one_is_culled(hub):
    base = hub["base"]
    # the day's secret: a wrong one is refused, the right one logs each participant in
    assert _refused(base, USERS[0], "not-the-secret")
    sessions = {}
    try:
        for name in USERS:
            sessions[name], reply = _login(base, name, "the-day-secret")
            assert reply.status_code == 302, (reply.status_code, reply.text[:300])
        assert _refused(base, "root", "the-day-secret")  # not a participant's name
        _isolated_servers(hub, sessions)
    finally:
        for session in sessions.values():  # no socket left for the garbage collector to warn about later
            session.close()
        gc.collect()  # a socket leaked anyway warns here, in this test, not in whichever test runs next


def _refused(base: str, name: str, password: str) -> bool:
    session, reply = _login(base, name, password)
    session.close()
    return reply.status_code == 403


def _isolated_servers(hub: dict, sessions: dict) -> None:
    import requests

    base, token = hub["base"], hub["token"]
    api = {"Authorization": f"token {token}"}
    spawn_seconds = {name: _spawn(base, api, name, hub["log"]) for name in USERS}
    seen = {}
    for name, other in zip(USERS, reversed(USERS), strict=True):
        # each participant reaches their own server with their login, and not the other's
        # (the browser's way: JupyterLab's page sends them through the hub's OAuth, which sets the server's cookie)
        assert sessions[name].get(f"{base}/user/{name}/lab", timeout=60).status_code == 200
        own = sessions[name].get(f"{base}/user/{name}/api/contents/", timeout=60)
        assert own.status_code == 200
        assert "00_environment.ipynb" in {e["name"] for e in own.json()["content"]}
        assert sessions[name].get(f"{base}/user/{other}/lab", timeout=60).status_code == 403
        out = asyncio.run(_run_cell(base, name, token, CELL.format(other=f"/home/{other}/outputs")))
        seen[name] = json.loads(out.strip().splitlines()[-1])
    a, b = (seen[n] for n in USERS)
    assert (a["user"], b["user"]) == USERS  # each server runs as its participant
    assert {a["device"], b["device"]} == {"0", "1"}  # a device each
    assert a["outputs"] != b["outputs"]
    assert a["warm cache"]
    assert b["warm cache"]
    for seen_by in (a, b):
        assert (seen_by["read other"], seen_by["write other"], seen_by["write own"]) == ("denied", "denied", "allowed")
    # nothing listens beyond the loopback: the hub, its proxy and culler, both servers and their kernels
    processes = [psutil.Process(hub["proc"].pid), *psutil.Process(hub["proc"].pid).children(recursive=True)]
    processes += [p for p in psutil.process_iter(["username"]) if p.info["username"] in USERS]
    sockets = listeners(processes)
    assert sockets, [s for s in sockets if not s["loopback"]]
    assert all(s["loopback"] for s in sockets), [s for s in sockets if not s["loopback"]]
    pss = {
        n: sum(p.memory_full_info().pss for p in psutil.process_iter(["username"]) if p.info["username"] == n)
        for n in USERS
    }
    print(
        f"spawn seconds: {spawn_seconds}; memory (PSS) per participant with a kernel that imported torch and "
        f"helpers, MiB: { {n: round(v / 2**20) for n, v in pss.items()} }"
    )
    # idle: with COURSE_HUB_IDLE=12 the culler stops both servers, and says so
    deadline = time.time() + 90
    while time.time() < deadline:
        servers = [requests.get(f"{base}/hub/api/users/{n}", headers=api, timeout=10).json()["servers"] for n in USERS]
        if not any(servers):
            break
        time.sleep(2)
    assert not any(servers), "the idle servers were not culled"
    assert all(f"Culling server {n}" in hub["log"].read_text() for n in USERS), "stopped, but not by the culler"
    # stopping the hub with a live server and a detached job of its participant leaves nothing behind
    _spawn(base, api, USERS[0], hub["log"])
    asyncio.run(_run_cell(base, USERS[0], token, DETACHED))
    hub["proc"].terminate()
    hub["proc"].wait(timeout=60)
    time.sleep(1)
    found = []
    for p in psutil.process_iter(["name", "cmdline", "create_time", "username", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:  # exited, waiting for a parent (here, init) to reap it
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if p.info["create_time"] >= hub["started"] and (
            p.info["username"] in USERS or re.search(r"configurable-http-proxy|jupyterhub|idle_culler", cmd)
        ):
            found.append((p, cmd))
    _, alive = psutil.wait_procs([p for p, _ in found], timeout=15)  # one still exiting gets a few seconds
    left = [f"{cmd[:120]} ({p.pid})" for p, cmd in found if p in alive and _not_a_zombie(p)]
    assert not left, f"left running after the hub stopped: {left}"


DETACHED = "import subprocess; subprocess.Popen(['sleep', '300'], start_new_session=True); print('started')"


def _spawn(base: str, api: dict, name: str, log: Path) -> float:
    """Spawn `name`'s server through the REST API; seconds until it is ready."""
    import requests

    t0 = time.perf_counter()
    assert requests.post(f"{base}/hub/api/users/{name}/server", headers=api, timeout=30).status_code in (201, 202)
    for _ in range(240):
        server = requests.get(f"{base}/hub/api/users/{name}", headers=api, timeout=10).json()["servers"].get("", {})
        if server.get("ready"):
            return time.perf_counter() - t0
        time.sleep(0.5)
    raise AssertionError(f"{name}'s server was not ready in 120 s:\n" + log.read_text()[-3000:])


def test_the_hub_refuses_to_start_without_a_secret(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COURSE_HUB_PASSWORD"}
    env["COURSE_HUB_STATE"] = str(tmp_path)
    proc = subprocess.run(
        [str(HUB), "-f", str(REPO / "hub" / "jupyterhub_config.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "COURSE_HUB_PASSWORD" in proc.stdout + proc.stderr


def test_the_cluster_values_file_is_valid_yaml_with_gpu_requests():
    import yaml

    values = yaml.safe_load((REPO / "hub" / "z2jh-values.yaml").read_text())
    limits = values["singleuser"]["extraResource"]["limits"]
    assert limits["nvidia.com/gpu"] in (1, "1")
    assert values["cull"]["enabled"] is True
    assert not values["hub"]["config"]["SharedPasswordAuthenticator"]["user_password"]  # no secret in the repo


def _not_a_zombie(p):
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_course_closed_to_participants_is_named():
    import importlib.util
    import tempfile

    spec = importlib.util.spec_from_file_location("hub_paths", REPO / "hub" / "_paths.py")
    paths = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paths)
    base = Path(tempfile.mkdtemp())  # under /tmp, which every user can enter (pytest's tmp_path is private)
    try:
        os.chmod(base, 0o755)
        private = base / "private"
        (private / "bin").mkdir(parents=True)
        (private / "bin" / "python").write_text("")
        os.chmod(private / "bin" / "python", 0o755)
        os.chmod(private, 0o700)
        assert paths.closed_to_others(private / "bin" / "python") == private
        os.chmod(private, 0o755)
        assert paths.closed_to_others(private / "bin" / "python") is None
    finally:
        shutil.rmtree(base)
