"""helpers.profiling: traces recorded quietly, loaded as data, and asked the capstone's questions."""

import json

import pandas as pd
import pytest
import torch
from conftest import one_line
from torch.profiler import record_function

from helpers import profiling


def loop(x, weight, sync):
    out = []
    for _ in range(2):
        with record_function("step"):
            y = torch.nn.functional.conv2d(x, weight)
            out.append(y.sum().item() if sync else y.sum())
    return out


def test_trace_answers_the_capstone_questions(capfd):
    weight = torch.randn(4, 3, 3, 3)
    nhwc = torch.randn(1, 8, 8, 3).permute(0, 3, 1, 2)  # a channels-last view: not contiguous
    _, slow_path = profiling.record_trace(lambda: loop(nhwc, weight, sync=True), "t_slow", steps=1)
    _, fast_path = profiling.record_trace(
        lambda: loop(nhwc.contiguous().bfloat16(), weight.bfloat16(), sync=False), "t_fast", steps=1
    )
    assert "USDT" not in capfd.readouterr().err  # the profiler's marker lines are dropped
    slow = profiling.within(profiling.load_trace(slow_path), "step")
    fast = profiling.within(profiling.load_trace(fast_path), "step")
    assert profiling.read_backs(slow) == 2
    assert len(profiling.sync_calls(fast)) == 0  # one per .item()
    assert profiling.noncontiguous_inputs(slow, "aten::conv2d") == 2
    assert profiling.noncontiguous_inputs(fast, "aten::conv2d") == 0
    assert "c10::BFloat16" in profiling.input_types(fast, "aten::conv2d")
    assert "c10::BFloat16" not in profiling.input_types(slow, "aten::conv2d")
    top = profiling.top_ops(slow, 3)
    assert "count" in top.columns
    assert len(top) == 3


def test_device_gaps_from_a_synthetic_timeline():
    df = pd.DataFrame(
        {
            "name": ["k1", "k2", "k3", "op"],
            "cat": ["kernel", "kernel", "gpu_memcpy", "cpu_op"],
            "ts": [0.0, 15.0, 18.0, 0.0],
            "dur": [10.0, 5.0, 2.0, 100.0],
        }
    )
    df["end"] = df["ts"] + df["dur"]
    gaps = profiling.device_gaps(df)
    assert list(gaps) == [5.0]  # idle from 10 to 15; the copy at 18 starts while k2 still runs


def test_load_trace_refuses_an_empty_trace(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ValueError, match="no complete events") as info:
        profiling.load_trace(path)
    assert one_line(info.value)


def test_record_trace_bad_input():
    with pytest.raises(TypeError, match="no arguments"):
        profiling.record_trace(None, "x")
    with pytest.raises(ValueError, match="steps"):
        profiling.record_trace(lambda: None, "x", steps=0)


def test_gpu_trace_names_are_understood():
    # what a CUDA trace holds for one .item() inside a record_function range (names as CUPTI/Kineto write them)
    rows = [
        ("step", "user_annotation", 0, 100),
        ("step", "gpu_user_annotation", 5, 90),
        ("aten::item", "cpu_op", 10, 20),
        ("aten::_local_scalar_dense", "cpu_op", 11, 18),
        ("cudaMemcpyAsync", "cuda_runtime", 12, 3),
        ("cudaStreamSynchronize", "cuda_runtime", 15, 10),
        ("cudaStreamSynchronize", "cuda_runtime", 200, 5),
    ]
    df = pd.DataFrame(rows, columns=["name", "cat", "ts", "dur"])
    df["end"] = df["ts"] + df["dur"]
    df["args"] = [{}] * len(df)
    body = profiling.within(df, "step")
    assert profiling.read_backs(body) == 1
    assert list(profiling.sync_calls(body)["name"]) == ["aten::_local_scalar_dense", "cudaStreamSynchronize"]


def test_conv_relayouts_and_conv_backends_name_what_the_trace_shows():
    """A channels-last input on an NCHW model makes every convolution copy its weights (found inside conv2d);
    an NCHW input does not. The backend op names say which path ran."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    conv = torch.nn.Conv2d(8, 8, 3, padding=1).eval()
    x = torch.randn(1, 8, 12, 12)
    traces = {}
    for name, inp in (("mixed", x.contiguous(memory_format=torch.channels_last)), ("nchw", x)):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, torch.inference_mode():
            conv(inp)
        path = profiling.traces_dir() / f"test_relayout_{name}.json"
        prof.export_chrome_trace(str(path))
        traces[name] = profiling.load_trace(path)
    assert len(profiling.conv_relayouts(traces["mixed"])) >= 1
    assert len(profiling.conv_relayouts(traces["nchw"])) == 0
    backends = profiling.conv_backends(traces["nchw"])
    assert backends["count"].sum() == 1
    assert set(backends.index) <= set(profiling.CONV_BACKENDS)


def _cpu_roofline(peak_flops, spread=None):
    from helpers import roofline

    return roofline.Roofline(
        device="cpu",
        machine_id="t",
        peak_flops=peak_flops,
        bandwidth=1e10,
        dispatch_latency=5e-6,
        cache_bytes=2**25,
        mode="quick",
        spread=spread or {},
    )


def test_the_roofline_says_where_reduced_precision_pays():
    rf = _cpu_roofline({"fp32": 100e9, "bf16": 90e9}, spread={"fp32": 0.05})
    assert not rf.pays("bf16")  # emulated bf16: its roof at or below fp32's
    rf.peak_flops["bf16"] = 400e9
    assert rf.pays("bf16")
    rf.spread["bf16"] = 0.9  # too noisy to tell
    assert not rf.pays("bf16")
    assert not rf.pays("fp16")  # not measured here


def test_mfu_is_a_share_of_the_dtype_roof_and_none_beyond_it():
    rf = _cpu_roofline({"fp32": 100e9, "int8": 400e9})
    assert rf.mfu(37e9) == pytest.approx(0.37)
    assert rf.mfu(100e9, "int8") == pytest.approx(0.25)  # each dtype against its own roof
    assert rf.mfu(120e9) is None  # beyond the measured roof: that roof does not bound it, no share above 100 %
    assert rf.mfu(10e9, "bf16") is None  # no bf16 roof measured
    with pytest.raises(ValueError, match="achieved_flops") as info:
        rf.mfu(-1.0)
    assert one_line(info.value)


def test_kernel_time_follows_launches_from_inside_the_ops_to_their_kernels():
    import pandas as pd

    rows = [
        ("aten::conv2d", "cpu_op", 0, 10, 1, {}),
        ("cudaLaunchKernel", "cuda_runtime", 2, 1, 1, {"correlation": 7}),
        ("aten::add", "cpu_op", 20, 5, 1, {}),
        ("cudaLaunchKernel", "cuda_runtime", 21, 1, 1, {"correlation": 8}),
        ("cudaLaunchKernel", "cuda_runtime", 3, 1, 2, {"correlation": 9}),  # another thread: not the conv's
        ("implicit_gemm", "kernel", 30, 40, 9, {"correlation": 7}),
        ("elementwise", "kernel", 80, 3, 9, {"correlation": 8}),
        ("other", "kernel", 90, 11, 9, {"correlation": 9}),
    ]
    df = pd.DataFrame(rows, columns=["name", "cat", "ts", "dur", "tid", "args"])
    df["end"] = df["ts"] + df["dur"]
    assert profiling.kernel_time(df, df[df["name"] == "aten::conv2d"]) == 40.0
    assert profiling.kernel_time(df, df[df["cat"] == "cpu_op"]) == 43.0
    cpu_only = df[df["cat"] == "cpu_op"]
    assert profiling.kernel_time(cpu_only, cpu_only) == 0.0


def test_the_nsight_script_runs_no_torch_profiler_and_says_why_it_stops_without_a_gpu():
    """08's Nsight recipe profiles scripts/profile_nsight.py, not the notebook: one CUPTI subscriber per process."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "profile_nsight.py"
    assert "torch.profiler" not in script.read_text().split('"""', 2)[2], "the script must not start torch.profiler"
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the script would record for real")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out
    assert "no CUDA GPU" in out.stdout, out
    assert len(out.stdout.strip().splitlines()) == 1, out
