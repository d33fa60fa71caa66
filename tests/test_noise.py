"""The allow-list of known-harmless library messages (helpers.noise.KNOWN): each entry is still emitted by the
libraries as pinned (an entry nothing emits fails), is hidden once helpers is imported, and is explained in the
markdown of the notebook it names; every other message still shows."""

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
import torch
from torch.utils.data import DataLoader

from helpers import noise

REPO = Path(__file__).resolve().parents[1]

# Makes the libraries emit every message of KNOWN that this kind of machine can produce, through their real
# code paths; prints the warnings raised and everything written to file descriptor 2 (logs, native code).
TRIGGERS = r"""
import json, os, sys, tempfile, warnings
capture = tempfile.TemporaryFile()
saved = os.dup(2)
os.dup2(capture.fileno(), 2)
if sys.argv[1] == "with-helpers":
    import helpers
with warnings.catch_warnings(record=True) as caught:
    if sys.argv[1] == "raw":
        warnings.simplefilter("always")
    import torch
    import torch.utils.cpp_extension  # cuda-home
    from torch.utils.data import DataLoader
    list(DataLoader(torch.arange(4), batch_size=2, pin_memory=True))  # pin-memory
    import torchao  # torchao-enum
    from torch.profiler import profile
    if sys.argv[1] == "with-helpers":
        from helpers.profiling import quiet_profile as profile  # the course's way of starting the profiler
    with profile():  # profiler-usdt, kineto-no-gpu
        torch.ones(3) + 1
    import onnxruntime
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnxruntime.InferenceSession(model.SerializeToString(),  # ort-cuda-fallback
                                 providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    layer = torch.nn.Sequential(torch.nn.Linear(16, 16))
    quantize_(layer, Int8WeightOnlyConfig())
    torch.compile(layer)(torch.randn(2, 16))  # stable-hash
    torch._logging.set_logs(recompiles=True)  # recompiles-log: a second shape recompiles, and says why
    twice = torch.compile(lambda x: x * 2)
    twice(torch.ones(2)), twice(torch.ones(3))
    torch._logging.set_logs()
    torch._dynamo.config.recompile_limit = 1  # recompile-limit: a second shape past a limit of one
    fixed = torch.compile(lambda x: x + 1, dynamic=False, backend="eager")
    fixed(torch.ones(2)), fixed(torch.ones(3))
    if torch.cuda.is_available():  # tf32-available: Inductor compiling an fp32 matmul on a TF32 GPU
        torch.compile(torch.nn.Linear(64, 64).cuda())(torch.randn(8, 64, device="cuda"))
sys.stderr.flush()
os.dup2(saved, 2)
capture.seek(0)
lines = [str(w.message) for w in caught] + capture.read().decode(errors="replace").splitlines()
print(json.dumps(lines))
"""


@pytest.fixture(scope="module")
def emitted():
    """The lines the libraries emit: without helpers' filters, and with helpers imported first."""
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    out = {}
    for mode in ("raw", "with-helpers"):
        proc = subprocess.run(
            [sys.executable, "-c", TRIGGERS, mode], capture_output=True, text=True, env=env, timeout=300, cwd=REPO
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _here(entry):
    gpu = torch.cuda.is_available()
    return entry.where == "any" or entry.where == ("gpu" if gpu else "cpu")


@pytest.mark.parametrize("entry", noise.KNOWN, ids=lambda e: e.key)
def test_each_entry_is_still_emitted_and_hidden_by_helpers(entry, emitted):
    import re

    if not _here(entry):
        pytest.skip(f"{entry.key}: emitted only {'with' if entry.where == 'gpu' else 'without'} a CUDA GPU")
    raw = [line for line in emitted["raw"] if re.search(entry.pattern, line)]
    assert raw, f"{entry.key}: the libraries no longer emit it: remove the entry (or fix its pattern)"
    if not entry.hidden:
        return  # shown where a learner's own call causes it; its notebook explains it
    hidden = [line for line in emitted["with-helpers"] if re.search(entry.pattern, line)]
    assert not hidden, f"{entry.key}: still shown with helpers imported: {hidden[:2]}"


def test_nothing_else_is_hidden(emitted):
    """With helpers imported, only the allowed lines disappear; anything else the triggers print remains."""
    import re

    def shape(line):  # two processes differ in timestamps and pids, not in what they say
        return re.sub(r"\d+", "#", line)

    others = {shape(line) for line in emitted["raw"] if line.strip() and noise.allowed(line) is None}
    kept = {shape(line) for line in emitted["with-helpers"]}
    assert others <= kept, f"hidden although no entry allows it: {sorted(others - kept)[:3]}"


@pytest.mark.parametrize("entry", noise.KNOWN, ids=lambda e: e.key)
def test_each_entry_is_explained_by_the_notebook_it_names(entry):
    path = REPO / "notebooks" / f"{entry.notebook}.ipynb"
    assert path.exists(), f"{entry.key}: no notebook {entry.notebook}"
    markdown = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    assert entry.explained in markdown, f"{entry.key}: {entry.notebook}'s markdown does not explain it"
    assert entry.kind in ("warning", "log", "stderr")
    assert entry.where in ("cpu", "gpu", "any")
    assert entry.kind != "log" or entry.logger, f"{entry.key}: a log entry names its logger"


def test_allowed_finds_the_entry_and_honours_the_notebooks():
    line = "W1201 12:00:00 1 torch/utils/cpp_extension.py:183] No CUDA runtime is found, using CUDA_HOME='/usr'"
    assert noise.allowed(line).key == "cuda-home"
    assert noise.allowed(line, notebooks={"00_environment"}).key == "cuda-home"
    assert noise.allowed(line, notebooks={"08_profiling"}) is None  # not explained there
    assert noise.allowed("RuntimeError: something real") is None
    with pytest.raises(KeyError, match="KNOWN has"):
        noise.known("nope")


def test_log_filters_drop_one_message_and_nothing_else(caplog):
    noise.install()
    noise.install()  # idempotent: one filter per logger
    logger = logging.getLogger("torch.utils.cpp_extension")
    assert sum(isinstance(f, noise._DropMessage) for f in logger.filters) == 1
    with caplog.at_level(logging.WARNING):
        logger.warning("No CUDA runtime is found, using CUDA_HOME='/usr/local'")
        logger.warning("a different warning")
    assert [r.getMessage() for r in caplog.records] == ["a different warning"]


def test_pin_memory_warning_only_is_filtered():
    loader = DataLoader(torch.arange(8), batch_size=4, pin_memory=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        noise.install()  # on top of "always", as a notebook has it from import
        list(loader)
        warnings.warn("some other warning", UserWarning, stacklevel=1)
    texts = [str(w.message) for w in caught]
    assert texts == ["some other warning"] or (torch.cuda.is_available() and "some other warning" in texts)


def test_kineto_is_quiet_only_without_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    probe = "import os, helpers; print(os.environ.get('KINETO_LOG_LEVEL'))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("None" if torch.cuda.is_available() else "5")
    # a value the user chose is never overridden
    out = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "KINETO_LOG_LEVEL": "1"}, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "1"


def test_the_process_wide_marker_filter_drops_only_the_markers():
    """filter_profiler_markers() (notebook 08's set-up) filters native stderr for the rest of the process: run in
    a child, since it replaces file descriptor 2 for good."""
    import subprocess
    import sys

    code = (
        "import os\n"
        "from helpers import noise\n"
        "noise.filter_profiler_markers(); noise.filter_profiler_markers()\n"
        "os.write(2, b'USDT: 12 profiler_start\\nkeep this line\\nUSDT: 13 profiler_stop\\n')\n"
        "from torch.profiler import profile\n"
        "with profile() as p:\n"
        "    pass\n"
        "os.write(2, b'and this one\\n')\n"  # the process ends at once: the last line must not be lost
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "keep this line" in out.stderr
    assert "and this one" in out.stderr
    assert "USDT" not in out.stderr
