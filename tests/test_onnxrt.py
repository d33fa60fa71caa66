"""helpers.onnxrt: export with a dynamic batch, honest providers, sessions, parity, int8 quantization."""

import numpy as np
import pytest
import torch
from conftest import one_line

from helpers import onnxrt


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    torch.manual_seed(0)
    model = SmallCNN().eval()
    path = onnxrt.export(model, torch.randn(2, 1, 8, 8), "small_cnn", folder=tmp_path_factory.mktemp("onnx"))
    return model, path


def test_export_has_a_dynamic_batch_and_runs_at_any_batch(cnn_path):
    model, path = cnn_path
    summary = onnxrt.graph_summary(path)
    dims = list(summary.inputs.values())[0]
    assert isinstance(dims[0], str)
    assert dims[1:] == [1, 8, 8]
    assert summary.ops.get("Conv") == 1
    assert summary.external_bytes == 0
    assert summary.opset >= 17
    ort_model = onnxrt.OrtModel(onnxrt.session(path))
    for batch in (1, 3, 17):
        x = torch.randn(batch, 1, 8, 8)
        torch.testing.assert_close(ort_model(x), model(x).detach(), rtol=1e-4, atol=1e-5)


def test_external_data_is_written_beside_the_graph(tmp_path):
    model = torch.nn.Linear(64, 64)
    path = onnxrt.export(model, torch.randn(2, 64), "lin", external_data=True, folder=tmp_path)
    summary = onnxrt.graph_summary(path)
    assert path.with_name("lin.onnx.data").exists()
    assert summary.external_bytes >= 64 * 64 * 4


def test_export_works_after_the_course_sets_cudnn_precision(tmp_path):
    saved = torch.backends.cudnn.conv.fp32_precision
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # what the notebooks do; torch.export then refuses alone
    try:
        onnxrt.export(SmallCNN().eval(), torch.randn(2, 1, 8, 8), "cnn_ieee", folder=tmp_path)
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"  # restored after the export
    finally:
        torch.backends.cudnn.conv.fp32_precision = saved


def test_export_bad_input(tmp_path):
    with pytest.raises(TypeError, match="nn.Module") as info:
        onnxrt.export(lambda x: x, torch.randn(2, 3), "f", folder=tmp_path)
    assert one_line(info.value)
    with pytest.raises(ValueError, match="at least 2") as info:
        onnxrt.export(torch.nn.Linear(3, 3), torch.randn(1, 3), "one", folder=tmp_path)
    assert one_line(info.value)


class _Untraceable(torch.nn.Module):
    """Runs in eager mode, cannot be captured: a Python branch on a tensor's value."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x.nonzero().float()


def test_a_model_that_runs_but_cannot_be_exported_ends_in_one_line(tmp_path, capfd):
    with pytest.raises(RuntimeError, match="could not capture _Untraceable.*data-dependent") as info:
        onnxrt.export(_Untraceable(), torch.randn(4, 3), "untraceable", folder=tmp_path)
    assert one_line(info.value)
    assert info.value.__cause__ is not None  # the exporter's error is chained
    log = tmp_path / "untraceable.export.log"
    assert str(log) in str(info.value)
    assert "forward" in log.read_text()  # the wall of logs went to the file
    assert capfd.readouterr().err.count("\n") <= 2  # not to the learner's output
    assert not (tmp_path / "untraceable.onnx").exists()


def test_providers_are_what_works_not_what_is_listed(no_gpu, cnn_path, capfd):
    assert onnxrt.working_providers() == ["CPUExecutionProvider"]
    assert not onnxrt.provider_works("CUDAExecutionProvider")
    with pytest.raises(RuntimeError, match="working_providers") as info:
        onnxrt.session(cnn_path[1], provider="CUDAExecutionProvider")
    assert one_line(info.value)
    assert "onnxruntime:" not in capfd.readouterr().err  # ORT's log lines look like [E:onnxruntime:…]


def test_the_probe_really_opens_a_session(no_gpu, monkeypatch, capfd):
    # Pretend torch sees a GPU: the probe must then try the CUDA provider for real, see the session fall back
    # to the CPU (no driver here), answer False, and keep ORT's error lines out of the output.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not onnxrt.provider_works("CUDAExecutionProvider")
    works, why = onnxrt.provider_status("CUDAExecutionProvider")
    assert not works
    assert "fell back" in why or "failed" in why  # the reason is kept, not a guess
    assert "onnxruntime:" not in capfd.readouterr().err


def test_cpu_only_onnxruntime_beside_a_cuda_torch(monkeypatch):
    # The course's GPU machine: torch has CUDA, the onnxruntime wheel has only the CPU provider.
    import onnxruntime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert onnxrt.working_providers() == ["CPUExecutionProvider"]
    assert "CPU-only" in onnxrt.provider_status("CUDAExecutionProvider")[1]
    assert onnxrt.provider_status("CPUExecutionProvider")[0]


@pytest.fixture
def cuda_model(cnn_path):
    """The small CNN and its ORT session on the CUDA provider, as an OrtModel (skipped where the provider fails)."""
    model, path = cnn_path
    if not onnxrt.provider_works("CUDAExecutionProvider"):
        pytest.skip("this onnxruntime has no working CUDA provider")
    return model, onnxrt.OrtModel(onnxrt.session(path, "CUDAExecutionProvider"))


@pytest.mark.gpu(reason="IO binding needs a CUDA GPU")
def test_io_binding_keeps_tensors_on_the_gpu_and_converts_dtypes(cuda_model):
    model, ort_model = cuda_model
    x = torch.randn(5, 1, 8, 8, device="cuda")
    out = ort_model(x.double())  # another dtype is converted, not reinterpreted
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), model(x.cpu()).detach(), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu(reason="a shared stream needs a CUDA GPU")
def test_a_gpu_session_runs_on_a_stream_of_torchs_and_orders_itself_on_the_gpu(cuda_model):
    model, ort_model = cuda_model
    assert ort_model.stream is not None
    assert ort_model.stream.cuda_stream != 0
    x = torch.randn(64, 1, 8, 8, device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # no host synchronisation inside the call (a function, not a context)
    try:
        out = ort_model(x * 2)  # x * 2 is queued on torch's default stream: ORT must wait for it on the GPU
        again = ort_model(x * 2)  # the binding is reused
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(out.cpu(), model(2 * x.cpu()).detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again, out)


class _FakeSession:
    def __init__(self, provider, options):
        self.provider, self.options = provider, options

    def get_providers(self):
        return [self.provider, "CPUExecutionProvider"]

    def get_provider_options(self):
        return {self.provider: self.options}


@pytest.mark.parametrize(
    "provider, options",
    [
        ("CPUExecutionProvider", {}),
        ("CUDAExecutionProvider", {"has_user_compute_stream": "0", "user_compute_stream": "0"}),
        ("CUDAExecutionProvider", {"has_user_compute_stream": "1", "user_compute_stream": "0"}),
        ("TensorrtExecutionProvider", {}),
    ],
)
def test_a_session_on_orts_own_stream_has_no_shared_stream(provider, options):
    assert onnxrt.shared_stream(_FakeSession(provider, options)) is None


def test_saving_an_all_level_graph_logs_nothing(cnn_path, tmp_path, capfd):
    import onnxruntime

    onnxruntime.set_default_logger_severity(2)  # as on a GPU machine, where warnings are not raised to errors
    try:
        onnxrt.session(cnn_path[1], level="all", optimized_path=tmp_path / "all.onnx")
    finally:
        onnxruntime.set_default_logger_severity(2 if torch.cuda.is_available() else 3)
    assert "onnxruntime:" not in capfd.readouterr().err


def test_session_bad_options(cnn_path):
    with pytest.raises(ValueError, match="level") as info:
        onnxrt.session(cnn_path[1], level="max")
    assert one_line(info.value)
    with pytest.raises(ValueError, match="threads"):
        onnxrt.session(cnn_path[1], threads=0)
    with pytest.raises(ValueError, match="not in this onnxruntime build"):
        onnxrt.session(cnn_path[1], provider="NoSuchExecutionProvider")


def test_sessions_do_not_spin_unless_asked(cnn_path):
    key = "session.intra_op.allow_spinning"  # spinning ORT threads hold the cores PyTorch needs in this process
    assert onnxrt.session(cnn_path[1]).get_session_options().get_session_config_entry(key) == "0"
    assert onnxrt.session(cnn_path[1], spinning=True).get_session_options().get_session_config_entry(key) == "1"


def test_optimized_graph_is_saved_and_smaller(cnn_path, tmp_path):
    out = tmp_path / "opt.onnx"
    onnxrt.session(cnn_path[1], level="extended", optimized_path=out)
    assert onnxrt.graph_summary(out).nodes < onnxrt.graph_summary(cnn_path[1]).nodes  # Conv+Relu fused


def test_quantize_static_and_dynamic(cnn_path):
    model, path = cnn_path
    with pytest.raises(ValueError, match="calibration") as info:
        onnxrt.quantize(path, "static")
    assert one_line(info.value)
    calibration = [np.random.default_rng(0).standard_normal((8, 1, 8, 8)).astype(np.float32)]
    static = onnxrt.quantize(path, "static", calibration)
    dynamic = onnxrt.quantize(path, "dynamic")
    with pytest.raises(ValueError, match="activations") as info:
        onnxrt.quantize(path, "static", calibration, activations="int4")
    assert one_line(info.value)
    assert "QuantizeLinear" in onnxrt.graph_summary(static).ops
    # U8S8 QDQ: the CPU provider runs the convolution as an integer QLinearConv
    assert onnxrt.optimized_summary(static).ops.get("QLinearConv") == 1
    assert "ConvInteger" in onnxrt.graph_summary(dynamic).ops  # the dynamic-conv pitfall's cause
    assert not path.with_name(f"{path.stem}.pre.onnx").exists()
    x = torch.from_numpy(calibration[0])
    for quantized in (static, dynamic):
        out = onnxrt.OrtModel(onnxrt.session(quantized))(x)
        assert out.shape == (8, 3)
        assert torch.isfinite(out).all()
        assert (out - model(x).detach()).abs().max() < 0.5  # int8, not garbage


def test_quantize_reduce_range_keeps_weights_in_seven_bits(cnn_path):
    """7-bit weights, for x86 CPUs without VNNI or AMX, where U8S8's 16-bit pair sums can saturate."""
    import onnx
    from onnx import numpy_helper

    model, path = cnn_path
    calibration = [np.random.default_rng(0).standard_normal((8, 1, 8, 8)).astype(np.float32)]

    def weight_range(p):
        m = onnx.load(str(p))
        ints = [numpy_helper.to_array(i) for i in m.graph.initializer if i.data_type == onnx.TensorProto.INT8]
        assert ints, "no int8 weights in the quantized model"
        return min(int(a.min()) for a in ints), max(int(a.max()) for a in ints)

    full = onnxrt.quantize(path, "static", calibration)
    seven = onnxrt.quantize(path, "static", calibration, reduce_range=True)
    assert seven != full  # its own file: a cached 8-bit model is never reused for it
    lo, hi = weight_range(seven)
    assert -64 <= lo
    assert hi <= 64
    assert max(-weight_range(full)[0], weight_range(full)[1]) > 64  # the 8-bit one does use the wider range
    x = torch.from_numpy(calibration[0])
    assert (onnxrt.OrtModel(onnxrt.session(seven))(x) - model(x).detach()).abs().max() < 0.5
    with pytest.raises(TypeError, match="reduce_range") as info:
        onnxrt.quantize(path, "static", calibration, reduce_range="yes")
    assert one_line(info.value)


def test_the_provider_probe_model_loads_in_this_onnxruntime():
    """provider_status probes a GPU provider with a one-node model: a model this ORT refuses (a newer IR
    version than it reads) would make every GPU provider look broken."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(onnxrt._tiny_model(), providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.ones(1, np.float32)})[0].tolist() == [1.0]


def test_tensorrt_libraries_are_found_where_make_trt_puts_them(tmp_path, monkeypatch):
    """Without TensorRT the provider is "not installed" (make trt), not "needs a GPU"; with its libraries on the
    path (files named as TensorRT 10's sonames, here), the answer moves on to the GPU."""
    import torch

    if onnxrt.find_library("libnvinfer.so.10") is None:  # as on the CI machine; after `make trt` it is found
        works, why = onnxrt.provider_status("TensorrtExecutionProvider")
        assert not works
        assert "make trt" in why
        assert "libnvinfer.so.10" in why
    else:
        monkeypatch.setattr(onnxrt, "_library_dirs", lambda: [])  # the real install hidden: the message again
        monkeypatch.setattr(onnxrt, "find_library", lambda soname: None)
        assert "make trt" in onnxrt.provider_status("TensorrtExecutionProvider")[1]
        monkeypatch.undo()
    for lib in onnxrt.TENSORRT_LIBS:
        (tmp_path / lib).write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    assert onnxrt.find_library("libnvinfer.so.10") == tmp_path / "libnvinfer.so.10"
    if not torch.cuda.is_available():
        works, why = onnxrt.provider_status("TensorrtExecutionProvider")
        assert not works
        assert "no CUDA GPU" in why
    report = onnxrt.tensorrt_report()
    assert str(tmp_path / "libnvonnxparser.so.10") in report
    assert "TensorrtExecutionProvider" in report


def test_the_tensorrt_pins_match_what_the_provider_links():
    """requirements-trt.txt pins TensorRT 10, the major version whose sonames the pinned provider links."""
    import re
    from pathlib import Path

    import onnxruntime

    provider = Path(onnxruntime.__file__).parent / "capi" / "libonnxruntime_providers_tensorrt.so"
    if not provider.exists():
        pytest.skip(f"this onnxruntime build has no TensorRT provider ({provider.name})")
    linked = set(re.findall(rb"libnv(?:infer|infer_plugin|onnxparser)\.so\.(\d+)", provider.read_bytes()))
    assert len(linked) == 1, f"the provider names TensorRT sonames of several majors: {linked}"
    major = linked.pop().decode()
    text = (Path(__file__).resolve().parents[1] / "requirements-trt.txt").read_text()
    pins = [line for line in text.splitlines() if line.startswith("tensorrt")]
    assert pins, (major, pins)
    assert all(f"=={major}." in pin for pin in pins), (major, pins)
    assert all(lib.endswith(f".so.{major}") for lib in onnxrt.TENSORRT_LIBS), (major, onnxrt.TENSORRT_LIBS)


def test_profile_ops_reports_the_kernels_that_ran(cnn_path):
    _, path = cnn_path
    ops = onnxrt.profile_ops(path, np.random.rand(4, 1, 8, 8).astype(np.float32), calls=3)
    assert "Conv" in ops or "FusedConv" in ops, ops
    assert all(us >= 0 for us in ops.values())
    assert list(ops.values()) == sorted(ops.values(), reverse=True)


def test_a_spinning_session_timed_beside_another_candidate_is_named():
    import onnxruntime as ort

    from helpers.timing import spinning_sessions

    model = onnxrt._tiny_model()
    spinning = ort.InferenceSession(model, providers=["CPUExecutionProvider"])  # ORT's default: threads spin
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    quiet = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    class Wrapper:  # a session inside an object, as OrtModel holds one
        def __init__(self, sess):
            self.sess = sess

        def __call__(self):
            return None

    found = spinning_sessions(
        {
            "ort spinning": lambda: spinning.run(None, {}),
            "wrapped": Wrapper(spinning),
            "ort quiet": lambda: quiet,
            "torch": lambda: 1,
        }
    )
    assert found == ["ort spinning", "wrapped"]
