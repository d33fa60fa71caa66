"""JupyterHub for a room of learners on one machine: `make hub` (as root) starts it. See TEACHING.md.

Each participant logs in with the day's shared secret and gets, as a Unix account of their own (created on first
login, in the group ``course``), a single-user JupyterLab opened on a private copy of the course's notebooks, a
GPU (or MIG slice) of their own from ``COURSE_HUB_GPUS``, a private outputs folder (mode 700) seeded with the
teacher's pre-warmed compile cache, a CPU-thread budget, and an idle server stopped after ``COURSE_HUB_IDLE``
seconds. Hub and proxy listen on 127.0.0.1 unless ``COURSE_HUB_IP`` says otherwise (put TLS in front of it: a
reverse proxy, or ``c.JupyterHub.ssl_cert``/``ssl_key``).

Settings (environment variables, read when the hub starts):

=========================== ======================================================================================
COURSE_HUB_PASSWORD         the day's shared secret (required, 8 characters or more)
COURSE_HUB_IP, _PORT        where the hub is served (default 127.0.0.1:8000)
COURSE_HUB_API_PORT         the hub's internal API port (default 8081); the proxy's API uses the next one
COURSE_HUB_GPUS             devices to hand out, comma-separated: "0,1,2,3" or MIG UUIDs; default: every GPU
                            ``nvidia-smi -L`` lists; none on a CPU machine
COURSE_HUB_THREADS          intra-op threads per participant (default: CPU cores ÷ COURSE_HUB_SEATS)
COURSE_HUB_SEATS            participants expected at once (default 8), for the default thread budget
COURSE_HUB_IDLE             seconds of inactivity before a server is stopped (default 3600)
COURSE_HUB_STATE            the hub's database, cookie secret, device assignments (default hub/state)
COURSE_HUB_WARM_CACHE       Inductor's cache to copy to each participant (default outputs/inductor-cache; Triton's,
                            outputs/triton-cache, is copied too where it exists)
=========================== ======================================================================================
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (JupyterHub's config loader defines it)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paths import closed_to_others  # noqa: E402 (after the path it is found on)

REPO = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("COURSE_HUB_STATE", REPO / "hub" / "state"))
STATE.mkdir(parents=True, exist_ok=True)
os.chmod(STATE, 0o700)
GROUP = "course"  # the Unix group of the accounts this hub created: the only ones it spawns
NAME = re.compile(r"^[a-z][a-z0-9]{2,15}$")


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, str(default))
    if not value.isdigit():
        raise SystemExit(f"{name}={value!r}: pass a whole number")
    return int(value)


def _gpus() -> list[str]:
    """``COURSE_HUB_GPUS``, or what ``nvidia-smi -L`` lists: the MIG slices' UUIDs where a GPU is partitioned,
    the GPU's UUID otherwise (UUIDs, not indices: CUDA's index order need not be nvidia-smi's)."""
    if "COURSE_HUB_GPUS" in os.environ:
        return [g.strip() for g in os.environ["COURSE_HUB_GPUS"].split(",") if g.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    devices, gpu = [], None
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)  # a hung driver: an error
    for line in listed.stdout.splitlines():
        uuid = re.search(r"UUID: ((?:GPU|MIG)-[0-9a-fA-F-]+)", line)
        if uuid and line.startswith("GPU "):
            gpu = uuid.group(1)
            devices.append(gpu)
        elif uuid and "MIG" in line and gpu in devices:  # a slice of the GPU above: hand out slices instead
            devices.remove(gpu)
            devices.append(uuid.group(1))
        elif uuid:
            devices.append(uuid.group(1))
    return devices


PASSWORD = os.environ.get("COURSE_HUB_PASSWORD", "")
if len(PASSWORD) < 8:
    raise SystemExit("set COURSE_HUB_PASSWORD to the day's shared secret (8 characters or more), then start the hub")
PYTHON = Path(REPO / ".venv" / "bin" / "python")
WARM = [
    Path(os.environ.get("COURSE_HUB_WARM_CACHE", REPO / "outputs" / "inductor-cache")),
    REPO / "outputs" / "triton-cache",
]
NEEDED = [
    (PYTHON, False),
    (REPO / "notebooks", True),
    (REPO / "helpers", True),
    *((w, True) for w in WARM if w.exists()),
]
for needed, read in NEEDED:  # each participant's server runs as that participant, and copies as them
    closed = closed_to_others(needed, read=read)
    if closed is not None:
        raise SystemExit(
            f"participants cannot reach {needed.resolve()}: {closed} is closed to other users. Run the course from "
            f"a Python and a checkout every user can read (e.g. Debian's python3.11, the repo outside /root), or "
            f"`chmod o+x {closed}` if that is acceptable on this machine."
        )
SBIN = "/usr/sbin:/usr/bin:/sbin:/bin"
RUNUSER = shutil.which("runuser", path=SBIN)
if RUNUSER is None or shutil.which("useradd", path=SBIN) is None:
    raise SystemExit("the course's hub runs on Linux with runuser and useradd (util-linux, shadow): not found here")
GPUS = _gpus()
SEATS = _int("COURSE_HUB_SEATS", 8)
THREADS = _int("COURSE_HUB_THREADS", max(1, (os.cpu_count() or 1) // max(SEATS, 1)))
IDLE = _int("COURSE_HUB_IDLE", 3600)
PORT, API_PORT = _int("COURSE_HUB_PORT", 8000), _int("COURSE_HUB_API_PORT", 8081)

if "COURSE_HUB_GPUS" not in os.environ and not GPUS:
    print("no GPU found: participants' servers run on the CPU (set COURSE_HUB_GPUS to hand out devices)")

# --- hub and proxy: the loopback unless told otherwise --------------------------------------------------------
c.JupyterHub.ip = os.environ.get("COURSE_HUB_IP", "127.0.0.1")
c.JupyterHub.port = PORT
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = API_PORT
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{API_PORT + 1}"
c.ConfigurableHTTPProxy.command = [str(REPO / "hub" / "node_modules" / ".bin" / "configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every participant's server

# --- who may log in: the day's shared secret, names of a safe shape ---------------------------------------------
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = PASSWORD
c.Authenticator.allow_all = True  # anyone with the secret; the name becomes their Unix account
c.Authenticator.username_pattern = NAME.pattern

# --- each participant's server ----------------------------------------------------------------------------------
c.JupyterHub.spawner_class = "localprocess"  # a process per participant, as their own Unix user
c.Spawner.cmd = [str(REPO / ".venv" / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab/tree/00_environment.ipynb"
c.Spawner.notebook_dir = "~/course"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 90


def _account(name: str) -> pwd.struct_passwd:
    """The participant's Unix account: created on first login in the group ``course``; an existing account
    outside that group (root, a teacher, a system user) is refused, never spawned as."""
    if not NAME.match(name):
        raise ValueError(f"refusing user name {name!r}")
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run([shutil.which("groupadd", path=SBIN) or "groupadd", GROUP], check=True, timeout=60)
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        useradd = shutil.which("useradd", path=SBIN) or "useradd"
        subprocess.run([useradd, "--create-home", "--gid", GROUP, "--shell", "/bin/bash", name], check=True, timeout=60)
        account = pwd.getpwnam(name)
    if account.pw_gid != grp.getgrnam(GROUP).gr_gid:
        raise ValueError(f"{name!r} is an existing account outside the group {GROUP!r}: not a participant")
    return account


def _not_a_participant(name: str) -> bool:
    """An existing Unix account outside the group ``course`` (root, the teacher, a system user)."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        return False
    try:
        return account.pw_gid != grp.getgrnam(GROUP).gr_gid
    except KeyError:
        return True


def post_auth_hook(authenticator, handler, authentication):
    """Refuse at login (403, as for a wrong secret) a name that is an existing non-participant account."""
    return None if _not_a_participant(authentication["name"]) else authentication


c.Authenticator.post_auth_hook = post_auth_hook


def _device_for(name: str) -> str:
    """The participant's device: kept across logins; a new participant gets the least-shared one."""
    path = STATE / "devices.json"
    assigned = json.loads(path.read_text()) if path.exists() else {}
    if name not in assigned or assigned[name] not in GPUS:
        if not GPUS:
            return ""
        load = {g: sum(1 for d in assigned.values() if d == g) for g in GPUS}
        assigned[name] = min(GPUS, key=lambda g: (load[g], GPUS.index(g)))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(assigned, indent=1))
        tmp.replace(path)  # atomic: a crash never leaves half a file
    return assigned[name]


# What a participant's first login sets up, run *as the participant* (never as root in their home: a symlink
# they planted there cannot make root touch another file): a private home and outputs, their own copy of the
# notebooks, a copy of the teacher's warm compile caches, a private temporary folder (Ray's too).
SETUP = """set -e
chmod 700 "$HOME"
mkdir -p "$HOME/outputs" "$HOME/tmp"
chmod 700 "$HOME/outputs" "$HOME/tmp"
[ -e "$HOME/course" ] || cp -r "$1" "$HOME/course"
[ -e "$HOME/outputs/inductor-cache" ] || [ ! -d "$2" ] || cp -r "$2" "$HOME/outputs/inductor-cache"
[ -e "$HOME/outputs/triton-cache" ] || [ ! -d "$3" ] || cp -r "$3" "$HOME/outputs/triton-cache"
"""


def pre_spawn_hook(spawner) -> None:
    account = _account(spawner.user.name)
    home = Path(account.pw_dir)
    subprocess.run(
        [RUNUSER, "-u", account.pw_name, "--", "sh", "-c", SETUP, "setup", str(REPO / "notebooks"), *map(str, WARM)],
        check=True,
        env={"HOME": str(home), "PATH": SBIN},
        timeout=600,  # copying the notebooks and the warm compile caches: seconds; a hung disk fails the spawn
    )
    outputs = home / "outputs"
    device = _device_for(spawner.user.name)
    spawner.environment = {  # a new dict: the configured one may be shared by every participant's spawner
        **spawner.environment,
        "CUDA_VISIBLE_DEVICES": device,  # "" on a CPU machine: no GPU at all
        "COURSE_OUTPUTS": str(outputs),
        "OMP_NUM_THREADS": str(THREADS),
        "MKL_NUM_THREADS": str(THREADS),
        "COURSE_HUB_DEVICE": device or "cpu",
        "PYTHONPATH": str(REPO),  # helpers, from the course checkout
        "TMPDIR": str(home / "tmp"),  # private: Ray's /tmp/ray would be the first participant's only
    }


def post_stop_hook(spawner) -> None:
    """Stop everything the participant left running (a detached job, a serving engine's workers): the spawner
    itself signals only the server's process."""
    import psutil

    uid = pwd.getpwnam(spawner.user.name).pw_uid
    for process in psutil.process_iter(["uids"]):
        if process.info["uids"] and process.info["uids"].real == uid:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


c.Spawner.pre_spawn_hook = pre_spawn_hook
c.Spawner.post_stop_hook = post_stop_hook

# --- idle servers stopped ---------------------------------------------------------------------------------------
c.JupyterHub.services = [
    {
        "name": "idle-culler",
        "command": [
            sys.executable,
            "-m",
            "jupyterhub_idle_culler",
            f"--timeout={IDLE}",
            f"--cull-every={max(IDLE // 6, 5)}",
        ],
    }
]
c.JupyterHub.load_roles = [
    {
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    }
]
