"""pyproject.toml names what `helpers` imports (the base dependencies, or an extra for what only some lessons
need), requirements.txt pins every one of them exactly, and the pins resolve on every platform the course
installs on (Linux x86-64 and ARM, macOS on Apple silicon)."""

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# import name → distribution name, where they differ
DISTRIBUTION = {
    "PIL": "pillow",
    "pynvml": "nvidia-ml-py",
    "onnxruntime": "onnxruntime-gpu",
    "IPython": "ipython",
    "mlperf_loadgen": "mlcommons-loadgen",
}


def _imports() -> set[str]:
    names = set()
    for path in (REPO / "helpers").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "helpers"}


def _project():
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_every_import_of_helpers_is_a_declared_dependency():
    project = _project()
    declared = set(project["dependencies"]) | {
        d.split(";")[0].strip() for extra in project["optional-dependencies"].values() for d in extra
    }
    missing = sorted(
        DISTRIBUTION.get(name, name) for name in _imports() if DISTRIBUTION.get(name, name) not in declared
    )
    assert not missing, f"helpers imports {missing}: add them to pyproject.toml (dependencies or an extra)"
    assert {"torch", "numpy", "pandas"} <= set(project["dependencies"])


def test_every_declared_dependency_is_pinned_exactly():
    pins = {}
    for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.split(";")[0].partition("==")  # a platform marker may follow the pin
            assert version, f"not an exact pin: {line!r}"
            assert re.fullmatch(r"[\w.+]+", version.strip()), f"not an exact pin: {line!r}"
            pins[name.strip().lower()] = version.strip()
    project = _project()
    for dep in [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]:
        name = dep.split(";")[0].strip()
        assert name.lower() in pins, f"{name} is declared in pyproject.toml but not pinned in requirements.txt"


def test_the_gpu_wheel_list_pins_what_requirements_pin():
    """scripts/gpu-wheels.txt (the wheels carried to a GPU machine without Jupyter) has the course's executor and
    torchao at requirements.txt's versions, one version of each, exact pins only."""

    def pins(path):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
        names = [line.partition("==")[0].lower().replace("_", "-") for line in lines]
        assert len(names) == len(set(names)), f"{path.name}: one version of each package"
        return {n: line.partition("==")[2] for n, line in zip(names, lines, strict=True)}

    wheels, required = pins(REPO / "scripts" / "gpu-wheels.txt"), pins(REPO / "requirements.txt")
    for name in ("papermill", "nbclient", "nbformat", "ipykernel", "ipywidgets", "torchao"):
        assert wheels.get(name) == required[name], (
            f"{name}: gpu-wheels.txt has {wheels.get(name)}, requirements.txt {required[name]}"
        )
    assert all(v for v in wheels.values())


PLATFORMS = {  # uv's name for each platform the README promises, and the ONNX Runtime build it must get
    "x86_64-manylinux_2_28": "onnxruntime-gpu",  # Linux x86-64: the CUDA builds
    "aarch64-manylinux_2_28": "onnxruntime",  # Linux ARM
    "aarch64-apple-darwin": "onnxruntime",  # macOS on Apple silicon: the CPU/MPS builds
}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_pins_resolve_on_every_platform_the_course_installs_on(platform, tmp_path):
    """uv resolves requirements.txt for the platform without installing anything: a pin with no wheel for one of
    them (onnxruntime-gpu on a Mac did) fails here, not on a learner's laptop. Needs the package index."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        pytest.skip("uv is not in this environment (make setup installs it)")
    env = {**os.environ, "MACOSX_DEPLOYMENT_TARGET": "14.0"}  # macOS 14 (Sonoma) and later
    run = subprocess.run(
        [str(uv), "pip", "compile", str(REPO / "requirements.txt"), "--python-platform", platform]
        + ["--python-version", "3.11", "--quiet", "-o", str(tmp_path / "resolved.txt")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if run.returncode != 0 and "No solution found" not in run.stderr:
        pytest.skip(f"uv could not reach the package index: {run.stderr.strip().splitlines()[-1:]}")
    assert run.returncode == 0, f"requirements.txt does not resolve on {platform}:\n{run.stderr[-1500:]}"
    resolved = {line.partition("==")[0] for line in (tmp_path / "resolved.txt").read_text().splitlines()}
    assert {"torch", "torchvision", "torchao", "ray", "mlcommons-loadgen", PLATFORMS[platform]} <= resolved
    assert ({"onnxruntime", "onnxruntime-gpu"} - {PLATFORMS[platform]}).isdisjoint(resolved)  # one build, not both
