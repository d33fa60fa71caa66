"""ONNX export and ONNX Runtime, the course's way: dynamic batch, honest providers, measured options.

- :func:`export` — ``torch.onnx.export(..., dynamo=True)`` with a dynamic batch dimension, checked with
  ``onnx.checker``, saved under the outputs folder;
- :func:`graph_summary` — opset, op counts, node count, graph and external-data bytes of a saved model;
- :func:`working_providers` — the execution providers that really run here (``get_available_providers()``
  lists CUDA and TensorRT on a GPU-less machine too: it says what the wheel was built with, not what works);
- :func:`session` — an ``InferenceSession`` with a named optimisation level, thread count, and optionally the
  optimised graph saved to disk;
- :class:`OrtModel` — a session called like a torch module: tensors in, tensors out; on CUDA through IO
  binding on a stream of torch's, so inputs and outputs stay on the GPU and no call waits on the host;
- :func:`quantize` — ORT's static (QDQ, per-channel, calibrated) or dynamic int8 quantization.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .checks import check_choice, check_instance, check_int
from .fp32 import consistent_fp32_flags
from .paths import atomic_path, check_file_name, ensure_dir, output_subdir

LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def _model_file(path: Any) -> Path:
    """``path`` must name an existing, non-empty file: refused here in one line, not deep inside ONNX Runtime."""
    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(f"path must be the path of an .onnx file, got {path!r}.")
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        why = "is empty" if path.is_file() else "does not exist"
        raise FileNotFoundError(f"the ONNX model {path} {why}: export it first (helpers.onnxrt.export).")
    return path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[-1 if text.startswith("[ONNXRuntimeError]") else 0][:200]


def _root_cause(exc: BaseException) -> str:
    """The first line of the innermost exception (the exporter wraps torch.export's error in its own), without
    terminal colour codes."""
    import re

    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return f"{type(exc).__name__}: {(text.splitlines() or [''])[0][:200]}"


@contextlib.contextmanager
def _exporter_log(log_path: Path) -> Iterator[Path]:
    """Hold what torch's loggers write to stderr during an export (graphs, guards, symbolic-shape warnings); torch's
    handlers look up ``sys.stderr`` when they write, so redirecting it catches them. On success it is written back
    to stderr as it would have been; on failure it goes to ``log_path`` and the error names the file."""
    import io
    import sys

    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield log_path
    except BaseException:
        log_path.write_text(held.getvalue())
        raise
    else:
        sys.stderr.write(held.getvalue())


def _load_failed(path: Path, exc: BaseException) -> ValueError:
    return ValueError(
        f"ONNX Runtime cannot load {path.name} ({_first_line(exc)}): a truncated or foreign file? Export the model "
        "again (helpers.onnxrt.export)."
    )


def onnx_dir() -> Path:
    """Where exported and quantized models go: ``<outputs>/onnx`` (git-ignored)."""
    return output_subdir("onnx")


def export(
    model: torch.nn.Module,
    example: torch.Tensor,
    name: str,
    dynamic_batch: bool = True,
    external_data: bool = False,
    folder: str | os.PathLike[str] | None = None,
) -> Path:
    """Export ``model`` (called on ``example``) to ``<folder>/<name>.onnx`` with the dynamo exporter, batch
    dimension dynamic, and check the file with ``onnx.checker``. ``external_data=True`` writes the weights
    to ``<name>.onnx.data`` beside the graph (needed beyond protobuf's 2 GB limit)."""
    import onnx

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"export() needs a torch.nn.Module, got {type(model).__name__}.")
    if not isinstance(example, torch.Tensor) or example.dim() == 0:
        raise ValueError("export() needs an example input tensor with a batch dimension, e.g. x[:2].")
    if dynamic_batch and example.shape[0] == 1:
        # torch.export specialises a dimension of size 1 (it cannot tell it from broadcasting)
        raise ValueError("use an example batch of at least 2 for a dynamic batch dimension (size 1 is specialised).")
    path = Path(folder or onnx_dir()) / f"{check_file_name('name', name)}.onnx"
    ensure_dir(path.parent)
    dynamic_shapes = ({0: torch.export.Dim("batch", min=1, max=65536)},) if dynamic_batch else None
    was_training = model.training
    model.eval()
    try:
        try:  # an example the model cannot run on: one line here, not the exporter's wall of logs and traces
            with torch.inference_mode():
                model(example)
        except Exception as exc:
            raise ValueError(
                f"{type(model).__name__} cannot run on the example of shape {tuple(example.shape)} "
                f"({_first_line(exc)}): pass an input it accepts, e.g. a batch of 2 real inputs."
            ) from exc
        with consistent_fp32_flags(), _exporter_log(path.with_suffix(".export.log")) as log:
            try:
                program = torch.onnx.export(
                    model, (example,), dynamo=True, dynamic_shapes=dynamic_shapes, verbose=False
                )
            except Exception as exc:  # one line that says what to change; the exporter's wall of logs to a file
                raise RuntimeError(
                    f"torch.onnx.export could not capture {type(model).__name__} ({_root_cause(exc)}): make forward "
                    f"traceable (no Python branch on a tensor's value, no .item() or data-dependent shape); the "
                    f"exporter's log is in {log}."
                ) from exc
    finally:
        model.train(was_training)
    if external_data:  # the graph names its weights file: both are written under their final names
        for stale in (path, path.with_name(path.name + ".data")):
            stale.unlink(missing_ok=True)
        program.save(str(path), external_data=True)
        onnx.checker.check_model(str(path))  # a path, so that external data is checked too
        return path
    with atomic_path(path) as tmp:  # a reader (another session, a later run) sees the old file or the new one
        program.save(str(tmp), external_data=False)
        onnx.checker.check_model(str(tmp))
    path.with_name(path.name + ".data").unlink(missing_ok=True)  # an earlier export's weights, now unused
    return path


@dataclass
class GraphSummary:
    path: Path
    opset: int
    nodes: int
    ops: dict[str, int]
    graph_bytes: int
    external_bytes: int
    inputs: dict[str, list[Any]]

    def row(self) -> dict[str, Any]:
        return {
            "file": self.path.name,
            "opset": self.opset,
            "nodes": self.nodes,
            "graph (KiB)": round(self.graph_bytes / 1024, 1),
            "external data (KiB)": round(self.external_bytes / 1024, 1),
            "inputs": ", ".join(f"{k}{v}" for k, v in self.inputs.items()),
            "ops": ", ".join(f"{op}×{n}" for op, n in self.ops.items()),
        }


def graph_summary(path: str | os.PathLike[str]) -> GraphSummary:
    """What is in a saved ONNX model: opset, ops by count, sizes, input shapes (``'batch'`` = dynamic)."""
    import onnx

    path = _model_file(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a truncated or foreign file: protobuf's DecodeError, not the file's name
        raise _load_failed(path, exc) from exc
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    ops = Counter(n.op_type for n in model.graph.node)
    data = path.with_name(path.name + ".data")
    inputs = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    return GraphSummary(
        path,
        opset,
        len(model.graph.node),
        dict(ops.most_common()),
        path.stat().st_size,
        data.stat().st_size if data.exists() else 0,
        inputs,
    )


@contextlib.contextmanager
def _ort_quiet(severity: int = 4) -> Iterator[None]:
    import onnxruntime as ort

    ort.set_default_logger_severity(severity)
    try:
        yield
    finally:
        ort.set_default_logger_severity(2 if torch.cuda.is_available() else 3)


def _tiny_model() -> bytes:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    # IR version 10 (ONNX 1.16): a newer onnx package writes a newer IR by default, which an older ORT refuses
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model.SerializeToString()


#: What ONNX Runtime's TensorRT provider library links from TensorRT (its NEEDED entries in onnxruntime-gpu
#: 1.31): TensorRT 10's sonames. ``make trt`` installs them (requirements-trt.txt).
TENSORRT_LIBS = ("libnvinfer.so.10", "libnvonnxparser.so.10")


def _library_dirs() -> list[Path]:
    """Where a pip-installed shared library can be: LD_LIBRARY_PATH, then the site-packages folders that
    NVIDIA's wheels use (``tensorrt_libs``, ``nvidia/*/lib``)."""
    import site

    dirs = [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    roots = [*site.getsitepackages(), site.getusersitepackages()]
    for root in map(Path, roots):
        dirs += [root / "tensorrt_libs", *sorted(root.glob("nvidia/*/lib")), *sorted(root.glob("nvidia/*/*/lib"))]
    return [d for d in dirs if d.is_dir()]


def find_library(soname: str) -> Path | None:
    """The file of a shared library by its soname (``libnvinfer.so.10``) in :func:`_library_dirs`, or in the
    system loader's cache (``ldconfig -p``); None when it is nowhere."""
    import subprocess

    check_file_name("soname", soname)
    for folder in _library_dirs():
        if (folder / soname).exists():
            return folder / soname
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in cache.splitlines():
        name, _, target = line.strip().partition(" => ")
        if name.split(" ")[0] == soname and target:
            return Path(target)
    return None


def tensorrt_report() -> str:
    """Where each TensorRT library the provider needs was found (or that it is missing), and the provider's
    status: what ``make trt`` prints after installing."""
    lines = [f"{lib}: {find_library(lib) or 'missing (make trt installs TensorRT 10)'}" for lib in TENSORRT_LIBS]
    works, why = provider_status("TensorrtExecutionProvider")
    return "\n".join([*lines, f"TensorrtExecutionProvider: {'works' if works else 'does not run here'}: {why}"])


def _load_tensorrt() -> str | None:
    """Load TensorRT's libraries into the process (by path, globally), so the provider's own dlopen finds them
    without LD_LIBRARY_PATH; the reason when one cannot be loaded."""
    import ctypes

    for lib in TENSORRT_LIBS:
        try:
            ctypes.CDLL(str(find_library(lib)), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return f"{lib} did not load ({str(exc).splitlines()[0]})"
    return None


def provider_status(provider: str) -> tuple[bool, str]:
    """``(works, why)``: whether a session asked for ``provider`` really gets it (ORT falls back to the CPU
    silently otherwise), and the reason when it does not (the exception's first line, or the fallback)."""
    import onnxruntime as ort

    check_instance("provider", provider, str, hint="pass a provider name, e.g. 'CUDAExecutionProvider'")
    if provider not in ort.get_available_providers():
        return False, f"not in this onnxruntime build ({ort.__version__}; a CPU-only wheel lists no GPU providers)"
    if provider == "CPUExecutionProvider":
        return True, "always available"
    missing = [lib for lib in TENSORRT_LIBS if find_library(lib) is None] if provider.startswith("Tensorrt") else []
    if missing:
        return False, f"TensorRT 10 is not installed ({', '.join(missing)} not found): `make trt` installs it"
    if not torch.cuda.is_available():  # CUDA and TensorRT providers need a CUDA GPU
        return False, "no CUDA GPU here (torch.cuda.is_available() is False)"
    if hasattr(ort, "preload_dlls"):  # CUDA/cuDNN libraries from the pip-installed nvidia wheels (torch's)
        with contextlib.suppress(Exception):
            ort.preload_dlls()
    if provider.startswith("Tensorrt") and (failed := _load_tensorrt()):
        return False, failed
    try:
        with _ort_quiet():
            sess = ort.InferenceSession(_tiny_model(), providers=[provider, "CPUExecutionProvider"])
            sess.run(None, {"x": np.ones(1, np.float32)})
    except Exception as exc:  # a provider library that fails to load is "not working", which is the answer
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return False, f"a session on it failed: {first}"
    if sess.get_providers()[0] != provider:
        return False, (
            "the session fell back to the CPU: ORT could not load the provider's libraries "
            "(CUDA 13 and cuDNN 9 for onnxruntime-gpu 1.31)"
        )
    return True, "a probe session ran on it"


def provider_works(provider: str) -> bool:
    """Whether a session asked for ``provider`` really gets it (see :func:`provider_status` for why not)."""
    return provider_status(provider)[0]


def working_providers() -> list[str]:
    """The providers that work here, fastest first: TensorRT and CUDA (if they load on a real GPU), then CPU."""
    return [p for p in ("TensorrtExecutionProvider", "CUDAExecutionProvider") if provider_works(p)] + [
        "CPUExecutionProvider"
    ]


def session(
    path: str | os.PathLike[str],
    provider: str = "CPUExecutionProvider",
    level: str = "all",
    threads: int | None = None,
    optimized_path: str | os.PathLike[str] | None = None,
    provider_options: dict[str, Any] | None = None,
    spinning: bool = False,
) -> Any:
    """An ``onnxruntime.InferenceSession`` on ``provider`` with graph optimisation ``level`` (disabled, basic,
    extended, all), ``threads`` intra-op threads (None: ORT's default, one per physical core), optionally writing the
    optimised graph to ``optimized_path``. Fails, rather than falling back, if the provider does not load.

    On a GPU provider ORT runs on a stream of torch's (the provider option ``user_compute_stream``, unless
    ``provider_options`` names one), so :class:`OrtModel` orders its work after torch's and torch's after it on the
    GPU, with no host synchronisation (ORT treats handle 0, torch's default stream, as no stream: a new one is
    taken from torch's pool). TensorRT is given the CUDA provider on the same stream for the nodes it cannot take.

    ``spinning``: ORT's intra-op threads busy-wait after each run by default (``session.intra_op.allow_spinning``),
    holding the cores that PyTorch's threads need in the same process; the course turns it off, since every
    comparison here runs both. Measured on a 2-vCPU AMD EPYC: a ResNet's batch-1 PyTorch call timed alternately
    with an ORT session took 7.8 ms with spinning, 3.4 ms without (3.1 ms alone). ``spinning=True`` restores
    ORT's default, for a process that runs ORT only."""
    import onnxruntime as ort

    path = _model_file(path)
    check_choice("level", level, LEVELS, hint="ONNX Runtime's graph optimisation, from none ('disabled') to all")
    if threads is not None:
        check_int("threads", threads, hint="pass the number of intra-op threads, or None for ORT's default")
    if provider not in ort.get_available_providers():
        raise ValueError(
            f"provider={provider!r} is not in this onnxruntime build; it has "
            f"{', '.join(ort.get_available_providers())}."
        )
    if not provider_works(provider):
        raise RuntimeError(
            f"{provider} does not load here (no CUDA GPU, or its libraries are missing); "
            "use helpers.onnxrt.working_providers() to pick one that works."
        )
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if threads is not None:
        options.intra_op_num_threads = threads
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
        if level == "all":
            # ORT warns that a graph saved at 'all' (with the CPU's NCHWc layout) runs only on this hardware:
            # the course says so in its own words, so the session's own log is kept to errors.
            options.log_severity_level = 3
    provider_options = dict(provider_options or {})
    providers: list[Any] = [(provider, provider_options)]
    if provider in GPU_PROVIDERS:
        gpu = int(provider_options.get("device_id", 0))
        if "user_compute_stream" not in provider_options:  # a stream of torch's pool on that GPU (never handle 0)
            provider_options["user_compute_stream"] = str(torch.cuda.Stream(device=gpu).cuda_stream)
        stream = provider_options["user_compute_stream"]
        if provider == "CUDAExecutionProvider":
            provider_options.setdefault("use_tf32", 0)  # fp32 means fp32, as in the course's PyTorch code
        else:  # TensorRT: the nodes it cannot take go to the CUDA provider (ORT's advice), same GPU and stream
            providers.append(
                ("CUDAExecutionProvider", {"device_id": gpu, "user_compute_stream": stream, "use_tf32": 0})
            )
    if provider != "CPUExecutionProvider":
        providers.append("CPUExecutionProvider")  # for the ops the accelerator does not implement
    try:
        return ort.InferenceSession(str(path), options, providers=providers)
    except Exception as exc:  # ORT's own exception types, one per failure: said in one line, the original chained
        raise _load_failed(path, exc) from exc


#: The providers that run on a CUDA GPU (and take a ``user_compute_stream``).
GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


def shared_stream(sess: Any) -> Any:
    """The stream of torch's that a GPU session runs on (its ``user_compute_stream``), as a ``torch.cuda`` stream;
    None where the session runs on ORT's own stream (or on the CPU)."""
    if not hasattr(sess, "get_providers"):
        raise TypeError(f"pass an onnxruntime InferenceSession (helpers.onnxrt.session), got {sess!r}.")
    provider = sess.get_providers()[0]
    if provider not in GPU_PROVIDERS:
        return None
    options = sess.get_provider_options().get(provider, {})
    handle = int(options.get("user_compute_stream", "0") or 0)
    if str(options.get("has_user_compute_stream", "0")).lower() not in ("1", "true") or not handle:
        return None
    return torch.cuda.ExternalStream(handle, device=int(options.get("device_id", 0)))


_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(int8)": np.int8,
}
_TORCH = {
    "tensor(float)": torch.float32,
    "tensor(float16)": torch.float16,
    "tensor(int64)": torch.int64,
    "tensor(uint8)": torch.uint8,
    "tensor(int8)": torch.int8,
}


class OrtModel:
    """Call an ONNX Runtime session like a model: ``OrtModel(sess)(x)`` with a torch tensor, returns a torch
    tensor (the first output). On the CPU provider through NumPy (no copy for a contiguous CPU tensor); on
    CUDA through IO binding with the tensors' own GPU memory, so nothing crosses to the host.

    On a GPU the binding is made once (per thread) and rebound by pointer at each call. Where the session runs on
    a stream of torch's (:func:`session` does that), the call is ordered on the GPU: ORT's stream waits for the
    caller's (x is written), the run skips ORT's closing ``cudaStreamSynchronize``
    (``disable_synchronize_execution_providers``), and the caller's stream waits for ORT's — as a torch module's
    call, it returns before the GPU has finished, and a timer must synchronise, as it does for torch. On ORT's own
    stream (a session made elsewhere) it synchronises the host before and after the run instead."""

    def __init__(self, sess: Any) -> None:
        import onnxruntime as ort

        if not hasattr(sess, "get_inputs") or not hasattr(sess, "run"):
            raise TypeError(f"OrtModel needs an onnxruntime InferenceSession (helpers.onnxrt.session), got {sess!r}.")
        self.session = sess
        self.input = sess.get_inputs()[0]
        self.output = sess.get_outputs()[0]
        self.provider = sess.get_providers()[0]
        self.on_gpu = self.provider in GPU_PROVIDERS
        self.dtype = _NUMPY.get(self.input.type, np.float32)
        self.stream = shared_stream(sess) if self.on_gpu else None
        self._no_sync = ort.RunOptions()
        self._no_sync.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self._local = threading.local()  # one binding per thread: a binding is not shared between runs

    def numpy(self, x: np.ndarray) -> np.ndarray:
        try:
            return self.session.run([self.output.name], {self.input.name: x})[0]
        except Exception as exc:  # a wrong shape or dtype: ORT's message, in one line, with what the model takes
            raise ValueError(
                f"the model's input {self.input.name} is {self.input.type} of shape {self.input.shape}; got "
                f"{getattr(x, 'dtype', type(x).__name__)} of shape {getattr(x, 'shape', '?')} ({_first_line(exc)})."
            ) from exc

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"an OrtModel takes a torch tensor, got {type(x).__name__} (.numpy() takes arrays).")
        if x.dtype.is_floating_point != np.issubdtype(self.dtype, np.floating):  # converted, never silently rescaled
            raise ValueError(
                f"the model's input {self.input.name} is {self.input.type}; a {x.dtype} tensor would be converted "
                "value for value (uint8 pixels are not scaled to [0, 1]): prepare it as the model was exported."
            )
        if self.on_gpu and x.is_cuda:
            return self._bound(x)
        array = x.detach().cpu().numpy()
        if array.dtype != self.dtype:
            array = array.astype(self.dtype)
        return torch.from_numpy(self.numpy(np.ascontiguousarray(array))).to(x.device)

    def _bound(self, x: torch.Tensor) -> torch.Tensor:
        # ORT reads the memory as the model's input type: a tensor of another dtype is converted, never reinterpreted
        x = x.to(_TORCH.get(self.input.type, torch.float32)).contiguous()
        shape = [x.shape[0] if isinstance(d, str) or d is None else d for d in self.output.shape]
        out = torch.empty(shape, dtype=_TORCH.get(self.output.type, torch.float32), device=x.device)
        binding = getattr(self._local, "binding", None)
        if binding is None:
            binding = self._local.binding = self.session.io_binding()
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        index = x.device.index or 0
        binding.bind_input(self.input.name, "cuda", index, self.dtype, tuple(x.shape), x.data_ptr())
        binding.bind_output(
            self.output.name, "cuda", index, _NUMPY.get(self.output.type, np.float32), tuple(out.shape), out.data_ptr()
        )
        caller = torch.cuda.current_stream(x.device)
        if self.stream is None:  # ORT's own stream: the host waits on both sides
            caller.synchronize()  # x is ready before ORT's stream reads it
            self.session.run_with_iobinding(binding)
            binding.synchronize_outputs()
            return out
        same = self.stream.cuda_stream == caller.cuda_stream
        if not same:
            self.stream.wait_stream(caller)  # on the GPU: ORT starts after x is written
        self.session.run_with_iobinding(binding, self._no_sync)
        if not same:
            caller.wait_stream(self.stream)  # on the GPU: the caller's next work starts after ORT wrote out
        return out


class _Reader:
    """A CalibrationDataReader over a list of input batches."""

    def __init__(self, name: str, batches: Iterable[np.ndarray]) -> None:
        self.name = name
        self.batches = iter(list(batches))

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self.batches, None)
        return None if batch is None else {self.name: batch}


def quantize(
    path: str | os.PathLike[str],
    mode: str,
    calibration: Iterable[np.ndarray] | None = None,
    name: str | None = None,
    activations: str = "uint8",
    reduce_range: bool = False,
) -> Path:
    """int8-quantize a saved model with ONNX Runtime's tools; returns the new file's path.

    ``mode="static"``: QDQ format, per-channel int8 weights, activations (``"uint8"`` or ``"int8"``) with ranges
    calibrated on ``calibration`` (a list of input batches of real data). uint8 activations with int8 weights
    (U8S8) is what ORT's x86 int8 kernels are built for; with int8 activations (S8S8) its CPU provider leaves
    some operators in fp32 between Dequantize/Quantize pairs. ``mode="dynamic"``: int8 weights, activations
    quantized on the fly in every call (no calibration). Both run ``quant_pre_process`` first, as ORT advises.

    ``reduce_range=True`` quantizes the weights to 7 bits (-64…64). On an x86 CPU without VNNI or AMX, ORT's U8S8
    kernels multiply with ``VPMADDUBSW``, whose 16-bit sums of two products can saturate; 7-bit weights keep
    them in range (ORT's quantization docs advise it, or U8U8, where accuracy drops there).
    """
    check_choice("mode", mode, ("static", "dynamic"), hint="'static' is calibrated QDQ, 'dynamic' needs no calibration")
    if mode == "static" and not calibration:
        raise ValueError("static quantization needs calibration batches of real inputs (a list of arrays).")
    check_choice("activations", activations, ("uint8", "int8"), hint="'uint8' is U8S8, fastest on x86; 'int8' is S8S8")
    check_instance("reduce_range", reduce_range, bool, hint="pass True for 7-bit weights (x86 without VNNI or AMX)")
    src = _model_file(path)
    stem = name or src.stem
    pre = src.with_name(f"{stem}.pre.onnx")
    kind = (f"-{activations}" if mode == "static" else "") + ("-7bit" if reduce_range else "")
    out = src.with_name(f"{stem}.int8-{mode}{kind}.onnx")
    try:
        with _ort_quiet(3):
            _quantize(src, pre, out, mode, calibration, activations, reduce_range)
    except Exception as exc:  # ORT's tools fail deep inside (shape inference, calibration): one line, chained
        hint = "calibration batches shaped and typed as the model's input (arrays)" if mode == "static" else "a model"
        raise ValueError(f"ONNX Runtime could not quantize {src.name} ({_first_line(exc)}): pass {hint}.") from exc
    finally:
        pre.unlink(missing_ok=True)
    return out


def _quantize(
    src: Path, pre: Path, out: Path, mode: str, calibration: Any, activations: str, reduce_range: bool
) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    quant_pre_process(str(src), str(pre))
    if mode == "static":
        import onnx

        input_name = onnx.load(str(pre), load_external_data=False).graph.input[0].name
        act = QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8
        quantize_static(
            str(pre),
            str(out),
            _Reader(input_name, calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=act,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
        )
    else:
        quantize_dynamic(str(pre), str(out), weight_type=QuantType.QInt8, reduce_range=reduce_range)


def profile_ops(path: str | os.PathLike[str], x: np.ndarray, calls: int = 10) -> dict[str, float]:
    """ONNX Runtime's own profiler on the CPU provider (``enable_profiling``, as notebook 05 does by hand): the
    microseconds per call each op type spent in its kernels over ``calls`` runs of input ``x``, largest first."""
    import json

    import onnxruntime as ort

    check_int("calls", calls, hint="pass how many runs to profile, e.g. 10")
    # a file that is not a model is refused here: a profiling session that failed to load would still log an
    # error when it is destroyed
    path = graph_summary(path).path
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(onnx_dir() / f"{Path(path).stem}_profile")
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise _load_failed(path, exc) from exc
    model = OrtModel(sess)
    for _ in range(calls):
        model.numpy(x)  # a wrong input is refused in one line
    with open(sess.end_profiling(), encoding="utf-8") as f:
        events = json.load(f)
    totals: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
            totals[e["args"]["op_name"]] += e["dur"] / calls
    return dict(totals.most_common())


def optimized_summary(path: str | os.PathLike[str], level: str = "extended") -> GraphSummary:
    """The graph ONNX Runtime's CPU provider actually runs at ``level``: e.g. how many QDQ-wrapped convolutions
    it fused into ``QLinearConv`` and how many it left as fp32 ``Conv``."""
    path = Path(path)
    optimized = path.with_name(f"{path.stem}.opt-{level}.onnx")
    session(path, "CPUExecutionProvider", level=level, optimized_path=optimized)
    return graph_summary(optimized)
