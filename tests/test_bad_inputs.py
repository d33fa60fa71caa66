"""The bad-input probe: every public helper, called with one argument replaced by a bad value of its kind (None,
a wrong type, NaN or infinity where a number is needed, zero or negative sizes, empty or mismatched tensors, a
folder or a path that leaves the outputs folder where a file name is needed…), must refuse it with one clear
line raised by the course's own code, within seconds. The classes are those of the reliability review
(../shared/reviews/2026-12-01/reliability.md): clear, raw (an unplanned Python error inside helpers), deep (an
error from inside torch, numpy, pandas…), hang, and wrong (a bad value accepted, a result returned).

Target: at least 600 cases, at least 95 % clear, no wrong result and no hang. The figures are printed.
"""

from __future__ import annotations

import math
import signal
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import (
    batching,
    checks,
    coldstart,
    data,
    device,
    doctor,
    energy,
    fusion,
    harness,
    llm,
    llm_serving,
    memory,
    mlperf,
    models,
    noise,
    onnxrt,
    oom,
    opcount,
    paths,
    pipeline,
    plotting,
    processes,
    profiling,
    results,
    roofline,
    serving,
    timing,
)
from helpers.timing import Measurement
from helpers.verdict import (
    compare,
    independent_interval,
    noise_note,
    paired_interval,
    sweep_warning,
    verdict,
    winner,
)

HELPERS = str(Path(__file__).resolve().parents[1] / "helpers")
NAN, INF = float("nan"), float("inf")
M = Measurement.from_samples([1e-3, 1.1e-3, 0.9e-3, 1e-3, 1.05e-3], label="a")
M2 = Measurement.from_samples([2e-3, 2.1e-3, 1.9e-3, 2e-3, 2.05e-3], label="b")
CFG = llm.GPTConfig(vocab_size=32, n_layer=1, n_head=2, dim=16, max_seq_len=32)
GPT = llm.GPT(CFG).eval()
TINY = torch.nn.Linear(4, 2).eval()


_PROBE_DIR = Path(__import__("tempfile").mkdtemp(prefix="probe-"))
EMPTY_FILE = _PROBE_DIR / "empty.onnx"
EMPTY_FILE.write_bytes(b"")
GARBAGE_FILE = _PROBE_DIR / "garbage.onnx"
GARBAGE_FILE.write_bytes(b"not a model at all, and certainly no protobuf")
TRUNCATED_JPEG = _PROBE_DIR / "truncated.jpg"
TRUNCATED_JPEG.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 20)
TEXT_FILE = _PROBE_DIR / "notes.txt"
TEXT_FILE.write_text("not an image, not a trace")
JSON_LIST = _PROBE_DIR / "list.json"
JSON_LIST.write_text("[1, 2, 3]")
RELU_FILE = _PROBE_DIR / "relu.onnx"  # a one-op model (x: float[1] -> relu)


def _relu_model():
    from helpers import onnxrt

    RELU_FILE.write_bytes(onnxrt._tiny_model())
    sess = onnxrt.session(RELU_FILE, level="disabled")
    return onnxrt.OrtModel(sess)


RELU = _relu_model()
TRACE_DF = __import__("pandas").DataFrame(
    {"name": ["aten::mm"], "cat": ["cpu_op"], "ts": [0.0], "dur": [1.0], "end": [1.0], "tid": [1], "args": [{}]}
)
TINY_GPT = llm.GPT(llm.GPTConfig(vocab_size=16, dim=8, n_layer=1, n_head=2, max_seq_len=8)).eval()
LOADGEN_SUT = mlperf.SUT(lambda samples: [0] * len(samples), [1, 2, 3])
UNCACHED_GPT = llm.GPT(llm.GPTConfig(vocab_size=16, dim=8, n_layer=1, n_head=2, max_seq_len=8)).eval()  # never cached
DYNAMIC_CACHE = llm.DynamicKVCache()  # holds 2 positions: the next is 2
DYNAMIC_CACHE.update(torch.arange(2), torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4))
REQUEST = llm_serving.Request(0, 1.0, (1, 2), 2)
NOW_REQUEST = llm_serving.Request(0, 0.0, (1, 2), 2)  # arrives at once: a probe of serve does not wait
TINY_DRAFT = llm.GPT(llm.GPTConfig(vocab_size=16, dim=8, n_layer=1, n_head=2, max_seq_len=8), seed=1).eval()


def _rf():
    return roofline.Roofline(
        device="cpu",
        machine_id="probe",
        peak_flops={"fp32": 1e11},
        bandwidth=1e10,
        dispatch_latency=5e-6,
        cache_bytes=2**25,
        mode="quick",
    )


class _Untraceable(torch.nn.Module):
    def forward(self, x):  # a Python branch on a tensor's value: runs in eager mode, cannot be exported
        return x * 2 if x.sum() > 0 else x.nonzero().float()


# Bad values by the kind of argument they replace. A kind ending in "?" also accepts None (its default).
BAD = {
    "posint": [None, "3", 2.5, 0, -1, True, NAN, INF, [2]],
    "nonnegint": [None, "3", 2.5, -1, True, NAN],
    "posfloat": [None, "1", 0, -1.0, NAN, INF, True, [1.0]],
    "nonneg": [None, "1", -1.0, NAN, INF, True],
    "fraction": [None, "x", -0.1, 1.5, NAN, True],
    "callable": [None, 3, "f", [print]],
    "tensor": [None, [1.0, 2.0], 3, "x", torch.empty(0, 4)],
    "device": ["tpu", "cuda:9", 3, "", object(), "meta"],
    "filename": ["", "../x", "a/b", None, 3, ".x"],
    "measurement": [None, 3, "m", [M]],
    "measurements": [[], None, [None], "ab", [1.0], M],
    "batches": [[], None, [0], [-1], ["a"], [1.5], 4, [True]],
    "floats": [[], None, [NAN], ["a"], 4],
    "nonnegfloats": [[], None, [NAN], ["a"], [-1.0], 4],
    "measurements+": [None, [None], "ab", [1.0], M],  # an empty list is a valid (empty) table
    "posfloats": [[], None, [NAN], ["a"], [-1.0], [0.0], 4],
    "split": ["nope", None, 3, ""],
    "dtype": ["fp99", None, 3, ""],
    "bool": [None, "yes", 2, 0.5],
    "model": [None, 3, "resnet18", lambda x: x],
    "config": [None, 3, "gpt", {}],
    "ids": [None, [1, 2], torch.empty(0, dtype=torch.long), torch.ones(1, 3), torch.full((1, 3), 99)],
    "path": [None, 3, "/nonexistent/file.jsonl", "/"],
    "respath": [None, 3, "", "/"],  # a results file that does not exist yet is empty, not an error
    "roofline": [None, 3, "cpu", {}],
    "str": [None, 3, "", ["x"]],
    "number": [None, "1", True, [1.0]],  # NaN and infinity are values here (a statistic of no samples)
    # the classes of the 2026-12-03 reliability review, written from each helper's contract
    "finite": [torch.full((4, 4), NAN), torch.full((4, 4), INF)],  # a metric or training on non-finite inputs
    "labels": [torch.full((4,), 7), torch.full((4,), -1), torch.zeros(4)],  # 2 classes: out of range, or floats
    "rawdigits": [
        torch.zeros(2, 8, 8),  # already converted to floats
        torch.full((2, 8, 8), 17, dtype=torch.uint8),  # past the digits' 0…16
        torch.zeros(2, 7, 7, dtype=torch.uint8),  # not 8×8
        torch.zeros(2, 8, 8, dtype=torch.bool),
    ],
    "logits": [torch.full((4, 2), NAN)],
    "service": [lambda b: -1e-3, lambda b: NAN, lambda b: INF, lambda b: "1 ms"],  # impossible batch times
    "intervals": [[(2.0, 1.0)], [(NAN, 1.0)], [(0.0, INF)], [(1.0,)], "ab", None],
    "record": [None, [1, 2], "x", 3, {}],
    "example": [torch.ones(2, 5), torch.ones(2, 4, dtype=torch.long), torch.ones(1, 4), torch.tensor(1.0)],
    "limit": [None, "1", 0, -1.0, INF, True, [1.0]],  # a roofline's limit (NaN is allowed: not measured yet)
    "rowsfn": [lambda x: x[:1], lambda x: torch.tensor(1.0), lambda x: None],  # not one row per input
    "onnxpath": ["/nonexistent/m.onnx", EMPTY_FILE, GARBAGE_FILE, None, 3, ""],
    "ortinput": [np.ones((2, 3), dtype=np.float32), np.ones(1, dtype=np.int64), "x"],
    "calibration": [[np.ones((2, 3), dtype=np.float32)], ["x"], [None]],
    "samples": [None, 3, "x", [], torch.empty(0, 4)],  # LoadGen's samples: a non-empty sequence, not a string
    # the 2026-12-04 independent probe's classes (helper contracts: a request, a percentile, an interval, a path)
    "prompt": [(), "ab", (1.5,), (-1,), None, [True]],
    "percent": [None, -1, 101, NAN, "50", True],
    "percentvalues": [None, ["a"], 4, "ab"],
    "ratios": [None, [NAN], [-1.0], "ab", [[1.0]]],
    "times": [None, np.array([NAN] * 6), np.array([-1.0] * 6), "ab"],
    "prob": [0, 1, 1.5, NAN, True, "x"],
    "subdir": ["../x", "", "/etc", ".hidden", None, 3, "a/../../x"],
    "unwritable": ["/proc/probe-write.txt"],
    "text": [None, b"x", 3],
    "gpttokens": [
        torch.ones(1, 0, dtype=torch.long),
        torch.full((1, 3), 999),
        torch.full((1, 3), -1),
        torch.ones(3, dtype=torch.long),
        torch.ones(1, 3),
    ],
    "gptpos": [torch.arange(2), torch.tensor([0, 1, 999]), torch.tensor([-1, 0, 1]), torch.arange(3).float()],
    "photo": [TRUNCATED_JPEG, TEXT_FILE],
    "tracedf": [None, "x", __import__("pandas").DataFrame({"x": [1]})],
    "tracepath": ["/nonexistent/trace.json", TEXT_FILE, JSON_LIST, None],
    "byteids": [[-1], [300], torch.ones(2), None, "abc", [1.5], torch.ones(2, 3, dtype=torch.long)],
    "corpus": [torch.rand(300), torch.ones(3, 300, dtype=torch.long), torch.ones(300, dtype=torch.bool)],
    "uint8batch": [torch.zeros(2, 1, 8, 8, dtype=torch.uint8), torch.zeros(0, 3, 8, 8, dtype=torch.uint8)],
    "tracetimes": [[2.0, 1.5], [NAN], ["a"], [0.5]],  # decreasing, not finite, not a number, before the arrival
    "ortkind": [torch.ones(1, dtype=torch.long), torch.ones(1, dtype=torch.uint8), np.ones(1, dtype=np.float32)],
    "samelabel": ["b"],  # the baseline's own name
    "flag": ["yes", 1, None],
    "nocache": [UNCACHED_GPT],
    "skippedpos": [torch.tensor([5]), torch.tensor([0]), torch.tensor([2, 4])],
    "columnlist": ["p99_s", [3], 3],
    "lenpair": [(16,), None, "ab", (0, 5), (5, 2)],
    "samplestuple": [1.0, "ab", None, ("a",), (), (True,)],
    "refdir": ["/nonexistent-reference-folder"],
    "coldrows": [[], None, [None], "ab"],
    "sizes": [[], [0], ["a"], "ab"],
    "dtypelist": [[], "fp32", [3]],
    "peaks": [{"fp32": -1.0}, {"fp32": NAN}, {"fp32": "x"}, "x", 5],
    "limitnan": [-1.0, "x", None],  # a limit ≥ 0, or NaN (not measured)
    "rows": [None, "ab", {"a": 1}],
    "criteria": ["median_s", None, [3]],
    "emptytext": [""],
    "code": [None, 3, ["x"]],
    "remaining": [-1.0, NAN, "x", None, True],
    "emptyprompt": [torch.ones(1, 0, dtype=torch.long)],
    "choices": [None, 3, "ab"],
    "pathlike": [None, 3, ""],
    "recpath": [None, "", _PROBE_DIR],
    "rectext": [None, b"{}", 3],
    "session": [None, 3, "x"],
    "iterable": [None, 3, "ab"],
    "pairs": [None, [(2,)], "ab"],
    "loadrun": [None, "x"],
    "procs": [None, [12345678], "ab"],
    "verdictobj": [None, "x", 3],
    "perword": ["", None, 3],
    "linestr": [None, 5],
    "notebookset": ["00_environment", [3]],
    "frame": [None, "x", 3],
    "placed": [None, {}, "x"],
    "rooflinedict": [
        {"peak_flops": {"fp32": 1e11}, "bandwidth": "x", "dispatch_latency": 1e-6},
        None,
        {"peak_flops": 5},
    ],
    "blocktable": [None, 3],
    "module": [None, "x", 3],
    "metricsmap": [[1], "x"],
    "unit": [None, "", 3],
    "comparison": [None, "x"],
    "exception": [None, "x"],
    "exportable": [None, lambda x: x, _Untraceable()],  # not a module, or a module torch.export cannot capture
}


def _cases():
    """(case id, function, positional args, keyword args, the argument replaced, its bad value)."""
    specs = [
        # timing
        (timing.format_seconds, (1e-3,), {}, {"seconds": "number", "digits": "posint"}),
        (timing.format_rate, (100.0,), {}, {"per_second": "nonneg", "unit": None}),
        (timing.time_unit, (1e-3,), {}, {"seconds": "nonneg"}),
        (
            timing.benchmark,
            (torch.relu, torch.ones(2)),
            {"repeats": 5, "warmup": 1, "number": 1},
            {
                "repeats": "posint",
                "warmup": "nonnegint",
                "number": "posint?",
                "items": "posint?",
                "budget": "posfloat?",
            },
        ),
        (timing.benchmark, (torch.relu, torch.ones(2)), {"repeats": 5, "number": 1}, {"fn": "callable"}),
        (timing.timed_call, (torch.relu, torch.ones(2)), {}, {"fn": "callable", "device": "device"}),
        (compare, ([M, M2],), {}, {"measurements": "measurements"}),
        (noise_note, ([M, M2],), {}, {"measurements": "measurements+"}),
        (sweep_warning, ([1, 2], [M, M2]), {}, {"xs": "batches", "measurements": "measurements"}),
        (
            timing.interleaved,
            ({"a": lambda: None, "b": lambda: None},),
            {"repeats": 5, "warmup": 1},
            {"repeats": "posint", "warmup": "nonnegint", "min_sample_time": "posfloat", "budget": "posfloat?"},
        ),
        (
            timing.fit_to_budget,
            (lambda n: lambda: None, [1, 2]),
            {"limit": 1.0},
            {"make_call": "callable", "sizes": "posfloats", "limit": "posfloat?", "exponent": "posfloat"},
        ),
        (Measurement.from_samples, ([1e-3, 2e-3],), {}, {"samples": "nonnegfloats"}),
        # verdict
        (verdict, (M, M2), {}, {"candidate": "measurement", "baseline": "measurement", "confidence": "fraction"}),
        (winner, ([M, M2],), {}, {"measurements": "measurements"}),
        # device
        (device.choose_device, ("cpu",), {}, {"prefer": "device"}),
        (device.sync, ("cpu",), {}, {"device": "device"}),
        (device.machine_id, ("cpu",), {}, {"device": "device"}),
        (device.machine_load, (0.05,), {}, {"interval": "posfloat"}),
        # batching
        (
            batching.find_knee,
            ([1, 2, 4], [10.0, 18.0, 20.0]),
            {},
            {"batches": "batches", "throughputs": "posfloats", "within": "fraction"},
        ),
        (
            batching.choose_batch,
            ([1, 2, 4], [1e-3, 2e-3, 4e-3], 3e-3),
            {},
            {"batches": "batches", "latencies": "posfloats", "target": "posfloat"},
        ),
        (batching.latency_model, ([1, 2, 4], [1e-3, 2e-3, 4e-3]), {}, {"batches": "batches", "seconds": "posfloats"}),
        (
            batching.is_stable,
            (100.0, 8, lambda b: 1e-3 * b),
            {},
            {"rate": "posfloat", "max_batch": "posint", "service": "callable"},
        ),
        (
            batching.simulate_server,
            (100.0, 8, 1e-3, lambda b: 1e-3),
            {"n_requests": 50},
            {
                "rate": "posfloat",
                "max_batch": "posint",
                "timeout": "nonneg",
                "service": "callable",
                "n_requests": "posint",
            },
        ),
        (
            batching.sweep,
            (TINY, lambda b: torch.ones(b, 4), [1, 2]),
            {"repeats": 3, "number": 1},
            {"model": "callable", "make_input": "callable", "batches": "batches", "repeats": "posint"},
        ),
        # results
        (
            results.make_record,
            (M,),
            {"notebook": "00_x", "experiment": "e", "variant": "v"},
            {"notebook": "filename", "experiment": "str", "variant": "str", "batch": "posint?"},
        ),
        (results.read_records, ("/nonexistent/r.jsonl",), {}, {"path": "respath"}),
        (results.to_frame, ([],), {}, {"records": "measurements+"}),
        (results.load_reference, (), {}, {"notebook": "str?", "machine": "str?"}),
        # data and models
        (data.load_digits, ("test",), {}, {"split": "split"}),
        (data.load_digits_raw, ("test",), {}, {"split": "split"}),
        (data.digits_to_float, (torch.zeros(2, 8, 8, dtype=torch.uint8),), {}, {"images": "tensor"}),
        (data.digits_loader, ("test",), {"batch_size": 8}, {"split": "split", "batch_size": "posint"}),
        (data.read_photo, ("/nonexistent.jpg",), {}, {"path": "path"}),
        (data.photo_transform, (224,), {}, {"size": "posint"}),
        (models.digits_classifier, ("cpu",), {}, {"device": "device", "trained": "bool"}),
        (models.torchvision_model, ("resnet18", "cpu"), {}, {"name": "dtype", "device": "device"}),
        (
            models.accuracy,
            (TINY, torch.ones(4, 4), torch.zeros(4, dtype=torch.long)),
            {},
            {"model": "callable", "images": "tensor", "labels": "tensor"},
        ),
        (
            models.train_classifier,
            (TINY, torch.ones(4, 4), torch.zeros(4, dtype=torch.long)),
            {"epochs": 1},
            {
                "model": "model",
                "images": "tensor",
                "labels": "tensor",
                "epochs": "posint",
                "batch_size": "posint",
                "lr": "posfloat",
            },
        ),
        # energy
        (energy.counter, ("cpu",), {}, {"device": "device"}),
        (
            energy.samples,
            ({"a": lambda: None},),
            {"window": 0.2, "windows": 1},
            {"fns": "config", "device": "device", "window": "posfloat", "windows": "posint"},
        ),
        # memory and oom
        (memory.peak_allocated_bytes, (lambda: torch.ones(2), "cpu"), {}, {"fn": "callable", "device": "device"}),
        (
            oom.largest_fitting_batch,
            (lambda b: b,),
            {"limit": 64},
            {"try_batch": "callable", "limit": "posint", "start": "posint"},
        ),
        (
            oom.run_with_oom_backoff,
            (torch.relu, torch.ones(8, 2), 4),
            {},
            {"fn": "callable", "inputs": "tensor", "batch": "posint", "min_batch": "posint"},
        ),
        (oom.with_memory_cap, (lambda b: b, 2**20), {}, {"fn": "callable", "cap_bytes": "posfloat"}),
        (oom.free_memory, ("cpu",), {}, {"device": "device"}),
        # roofline
        (roofline.arithmetic_intensity, (10.0, 5.0), {}, {"flops": "nonneg", "nbytes": "posfloat"}),
        (
            roofline.matmul_cost,
            (4, 4, 4),
            {},
            {"m": "posint", "n": "posint", "k": "posint", "bytes_per_element": "posint"},
        ),
        (roofline.elementwise_cost, (1024,), {}, {"numel": "posint"}),
        (roofline.matmul_variant, ("fp32",), {}, {"dtype": "dtype"}),
        (roofline.h2d_variant, ("pinned",), {}, {"kind": "dtype"}),
        (
            roofline.memory_bandwidth,
            ("cpu",),
            {"nbytes": 2**20, "repeats": 2},
            {"device": "device", "nbytes": "posint?", "repeats": "posint?"},
        ),
        (
            roofline.matmul_flops,
            ("cpu",),
            {"n": 64, "repeats": 2},
            {"device": "device", "n": "posint", "repeats": "posint", "dtype": "dtype"},
        ),
        (roofline.dispatch_latency, ("cpu",), {"repeats": 2}, {"device": "device", "repeats": "posint?"}),
        (roofline.beyond_cache_bytes, ("cpu",), {}, {"device": "device", "minimum": "posint", "cap": "posint"}),
        (
            roofline.Roofline.place,
            (_rf(), 1e6, 1e4, 1e-3),
            {},
            {"flops": "nonneg", "nbytes": "posfloat", "seconds": "posfloat"},
        ),
        (plotting.roofline, (_rf(),), {}, {"rf": "roofline"}),
        # doctor and harness
        (opcount.count_ops, (torch.relu, torch.ones(2)), {}, {"fn": "callable"}),
        (
            doctor.diagnose,
            (torch.relu, torch.ones(2, 3), _rf()),
            {"repeats": 3},
            {"model": "callable", "example": "tensor", "rf": "roofline", "repeats": "posint?"},
        ),
        (harness.model_size_bytes, (TINY,), {}, {"model": "model"}),
        (harness.agreement, (torch.ones(4, 2), torch.ones(4, 2)), {}, {"reference": "tensor", "output": "tensor"}),
        # llm
        (
            llm.GPTConfig,
            (),
            {"vocab_size": 32, "n_layer": 1, "n_head": 2, "dim": 16, "max_seq_len": 32},
            {"vocab_size": "posint", "n_layer": "posint", "n_head": "posint", "dim": "posint", "max_seq_len": "posint"},
        ),
        (
            llm.generate,
            (GPT, torch.ones(1, 3, dtype=torch.long), 2),
            {},
            {"model": "model", "prompt": "ids", "new_tokens": "posint"},
        ),
        (
            llm.generate_uncached,
            (GPT, torch.ones(1, 3, dtype=torch.long), 2),
            {},
            {"model": "model", "prompt": "ids", "new_tokens": "posint"},
        ),
        (
            llm.kv_cache_bytes,
            (CFG, 1, 8),
            {},
            {"config": "config", "batch": "posint", "length": "posint", "bytes_per_element": "posint"},
        ),
        (llm.flops_per_token, (CFG, 8), {}, {"config": "config", "context": "nonnegint"}),
        (llm.linear_weight_bytes, (GPT,), {}, {"model": "model"}),
        # the reliability review's classes (2026-12-03): non-finite inputs, labels outside the classes, raw data
        # that is not raw, impossible service times and intervals, records that are not records, degenerate
        # models, a roofline with an impossible limit, and library errors at the course's boundary
        (
            models.accuracy,
            (TINY, torch.ones(4, 4), torch.zeros(4, dtype=torch.long)),
            {},
            {"images": "finite", "labels": "labels"},
        ),
        (
            models.train_classifier,
            (torch.nn.Linear(4, 2), torch.ones(4, 4), torch.zeros(4, dtype=torch.long)),
            {"epochs": 1},
            {"images": "finite", "labels": "labels"},
        ),
        (data.digits_to_float, (torch.zeros(2, 8, 8, dtype=torch.uint8),), {}, {"images": "rawdigits"}),
        (harness.agreement, (torch.ones(4, 2), torch.ones(4, 2)), {}, {"reference": "logits", "output": "logits"}),
        (harness.predict, (lambda x: x, torch.ones(4, 4)), {}, {"fn": "rowsfn"}),
        (batching.simulate_server, (100.0, 8, 1e-3, lambda b: 1e-3), {"n_requests": 50}, {"service": "service"}),
        (pipeline.overlap_seconds, ([(0.0, 1.0)], [(0.5, 2.0)]), {}, {"a": "intervals", "b": "intervals"}),
        (results.append_record, ({"a": 1}, _PROBE_DIR / "r.jsonl"), {}, {"record": "record"}),
        (models.DigitsCNN, (), {}, {"width": "posint", "hidden": "posint", "num_classes": "posint"}),
        (models.DigitsMLP, (), {}, {"hidden": "posint", "num_classes": "posint"}),
        (
            roofline.Roofline,
            ("cpu", "probe", {"fp32": 1e11}, 1e10, 5e-6),
            {},
            {"bandwidth": "limit", "dispatch_latency": "limit"},
        ),
        (
            doctor.diagnose,
            (torch.relu, torch.ones(2, 3), _rf()),
            {"repeats": 3},
            {"dtype": "dtype"},
        ),
        (onnxrt.session, (RELU_FILE,), {}, {"path": "onnxpath"}),
        # the 2026-12-04 probe: requests, percentiles and intervals, paths, the decoder's inputs
        (
            llm_serving.Request,
            (0, 0.0, (1, 2), 3),
            {},
            {"arrival": "nonneg", "max_new": "posint", "prompt": "prompt"},
        ),
        (llm_serving.percentile, ([0.1, 0.2], 50), {}, {"values": "percentvalues", "q": "percent"}),
        (M.quantile, (0.5,), {}, {"q": "fraction"}),
        (paired_interval, ([1.0] * 6,), {}, {"ratios": "ratios", "confidence": "prob"}),
        (
            independent_interval,
            (np.ones(6), np.ones(6)),
            {},
            {"baseline": "times", "candidate": "times", "confidence": "prob", "resamples": "posint"},
        ),
        (_rf().attainable, (1.0,), {}, {"intensity": "nonneg"}),
        (paths.output_subdir, ("probe",), {}, {"name": "subdir"}),
        (paths.write_atomic, (_PROBE_DIR / "w.txt", "t"), {}, {"path": "unwritable", "text": "text"}),
        (coldstart.empty_cache, (), {}, {"name": "filename?"}),
        (
            TINY_GPT.forward,
            (torch.ones(1, 3, dtype=torch.long), torch.arange(3)),
            {},
            {"tokens": "gpttokens", "pos": "gptpos"},
        ),
        (data.read_photo, (TRUNCATED_JPEG,), {}, {"path": "photo"}),
        (profiling.load_trace, (TEXT_FILE,), {}, {"path": "tracepath"}),
        *(
            (reader, (TRACE_DF, *extra), {}, {"df": "tracedf"})
            for reader, extra in (
                (profiling.top_ops, ()),
                (profiling.within, ("label",)),
                (profiling.conv_relayouts, ()),
                (profiling.conv_backends, ()),
                (profiling.sync_calls, ()),
                (profiling.read_backs, ()),
                (profiling.device_gaps, ()),
                (profiling.input_types, ("aten::mm",)),
                (profiling.noncontiguous_inputs, ("aten::mm",)),
                (profiling.kernel_time, (TRACE_DF,)),
            )
        ),
        (llm.GPT, (llm.GPTConfig(),), {}, {"config": "config"}),
        (llm_serving.make_requests, (torch.arange(300) % 256, 10.0, 1.0), {}, {"corpus": "corpus"}),
        (data.normalize_on_device, (torch.zeros(2, 3, 8, 8, dtype=torch.uint8),), {}, {"batch": "uint8batch"}),
        (llm_serving.Trace, (REQUEST,), {"times": [1.5, 2.0]}, {"times": "tracetimes"}),
        (RELU.__call__, (torch.ones(1),), {}, {"x": "ortkind"}),
        (energy.judge, ({"a": [1.0] * 5, "b": [2.0] * 5}, "a", "b"), {}, {"candidate": "samelabel"}),
        (opcount.OpCounter, (), {}, {"fused": "flag"}),
        (llm.prefill, (GPT, torch.ones(1, 2, dtype=torch.long)), {}, {"model": "nocache"}),
        (llm.decode_step, (GPT, torch.ones(1, 1, dtype=torch.long), torch.tensor([0])), {}, {"model": "nocache"}),
        (
            DYNAMIC_CACHE.update,
            (torch.tensor([2]), torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4)),
            {},
            {"pos": "skippedpos"},
        ),
        (profiling.top_ops, (TRACE_DF,), {}, {"n": "posint"}),
        (llm.bits_per_byte, (GPT, torch.arange(100) % 32), {"seq": 8}, {"data": "corpus", "seq": "posint"}),
        (
            llm.batch_consistency,
            (GPT, torch.ones(1, 3, dtype=torch.long)),
            {"batch_sizes": (1, 2)},
            {"prompt": "gpttokens", "batch_sizes": "sizes", "forward": "callable?"},
        ),
        (results.reference_table, ("01_bottlenecks", "x"), {}, {"columns": "columnlist"}),
        (llm.decode, ([72, 105],), {}, {"ids": "byteids"}),
        *(
            (
                cache,
                (1, 2, 8, 4),
                {},
                {"batch": "posint", "n_head": "posint", "max_len": "posint", "head_dim": "posint"},
            )
            for cache in (llm.StaticKVCache, llm.Int8KVCache)
        ),
        (llm_serving.make_requests, (torch.arange(300) % 256, 10.0, 1.0), {}, {"prompt_len": "lenpair"}),
        (Measurement, ((1e-3,) * 6,), {}, {"samples": "samplestuple"}),
        (results.load_reference, (), {}, {"reference_dir": "refdir"}),
        (coldstart.table, ([],), {}, {"rows": "coldrows"}),
        (batching.latency_model([1, 2], [1e-3, 2e-3]), (1,), {}, {"n": "posint"}),
        (timing.plan, ([1e-3], 1.0), {}, {"estimates": "nonnegfloats", "remaining": "remaining", "number": "posint?"}),
        (fusion.kernel_excerpt, ("def kernel(): pass",), {}, {"code": "code", "max_lines": "posint"}),
        (llm.BlockTable(8, 4).reserve, ("seq", 4), {}, {"length": "posint"}),
        (
            llm_serving.serve,
            (TINY_GPT, [NOW_REQUEST]),
            {"draft": TINY_DRAFT, "gamma": 2, "slots": 2},
            {"draft": "model?", "gamma": "posint", "slots": "posint"},
        ),
        (llm.encode, ("hi",), {}, {"text": "emptytext"}),
        (pipeline.wait_for_children, (), {"timeout": 0.1}, {"timeout": "nonneg"}),
        (roofline.cap_at_datasheet, (_rf(), {"fp32": 1e12}), {}, {"peaks": "peaks"}),
        (
            roofline.choose_roof,
            (1.0, 0.1, False, 1.0, 0.1, False),
            {},
            {"old": "limitnan", "new": "limitnan"},
        ),
        (
            harness.pareto_front,
            ([{"median_s": 1.0, "size_bytes": 1, "accuracy": 0.9}],),
            {},
            {"rows": "rows", "minimize": "criteria", "maximize": "criteria"},
        ),
        (roofline.matmul_roof, ("fp32",), {"budget": 0.01}, {"sizes": "sizes"}),
        (roofline.measure_roofline, (), {"store": False}, {"dtypes": "dtypelist"}),
        (llm.generate_uncached, (TINY_GPT, torch.ones(1, 2, dtype=torch.long), 2), {}, {"prompt": "emptyprompt"}),
        (fusion.kernel_names, ("",), {}, {"code": "code"}),
        (fusion.extern_calls, ("",), {}, {"code": "code"}),
        (fusion.short_kernel_name, ("void k()",), {}, {"name": "code"}),
        (checks.check_choice, ("x", "a", ["a"]), {}, {"choices": "choices"}),
        (paths.ensure_dir, (_PROBE_DIR / "d",), {}, {"path": "pathlike"}),
        (results.append_record, ({"a": 1}, _PROBE_DIR / "r2.jsonl"), {}, {"path": "recpath"}),
        (results.parse_records, ("",), {}, {"text": "rectext"}),
        (onnxrt.OrtModel, (RELU.session,), {}, {"sess": "session"}),
        (onnxrt.shared_stream, (RELU.session,), {}, {"sess": "session"}),
        (onnxrt.find_library, ("libnothing.so",), {}, {"soname": "filename"}),
        (pipeline.ThreadPrefetcher, ([1, 2],), {}, {"iterable": "iterable"}),
        (serving.batch_service_samples, ([(2, 1e-3)] * 3,), {}, {"batches": "pairs"}),
        (serving.latencies_of_all, (None, 1.0), {}, {"run": "loadrun"}),
        (serving.listeners, ([],), {}, {"processes": "procs"}),
        (roofline.save_roofline, (_rf(),), {}, {"rf": "roofline"}),
        (harness.predict, (lambda x: x, torch.ones(4, 4)), {}, {"prepare": "callable?"}),
        (
            energy.sentence,
            (verdict([1.0] * 6, [1.0] * 6, independent="probe"),),
            {},
            {"v": "verdictobj", "per": "perword"},
        ),
        (noise.allowed, ("a line",), {}, {"line": "linestr", "notebooks": "notebookset"}),
        (results.readable_reference, (__import__("pandas").DataFrame(),), {}, {"df": "frame"}),
        (roofline.Roofline.from_dict, ({},), {}, {"data": "rooflinedict"}),
        (_rf().explain_above_roof, ({"fraction_of_bound": 1.2, "bound": "memory"}, 1e6), {}, {"placed": "placed"}),
        (_rf().record, (print,), {}, {"recorder": "callable"}),
        (roofline.compare_with_reference, (), {}, {"rf": "roofline?"}),
        (
            llm.PagedKVCache,
            (llm.BlockTable(4, 4), 2, 4),
            {},
            {"table": "blocktable", "n_head": "posint", "head_dim": "posint"},
        ),
        (llm.decode_weight_bytes, (TINY_GPT,), {}, {"model": "module"}),
        (opcount.traffic, (torch.relu,), {}, {"fn": "callable"}),
        (results.make_record, (), {"notebook": "nb", "experiment": "e", "variant": "v"}, {"metrics": "metricsmap"}),
        (timing.format_rate, (10.0,), {}, {"unit": "unit"}),
        (timing.new_session, ("benchmark",), {}, {"kind": "unit"}),
        (doctor.doubling, (None, "a", "b"), {}, {"sizes": "comparison"}),
        (onnxrt.provider_status, ("CPUExecutionProvider",), {}, {"provider": "linestr"}),
        (oom.is_out_of_memory, (RuntimeError("x"),), {}, {"exc": "exception"}),
        # LoadGen (notebook 14): arguments refused before a test starts
        (
            mlperf.run,
            (LOADGEN_SUT, "SingleStream"),
            {"min_duration": 0.05, "folder": _PROBE_DIR / "loadgen"},
            {"scenario": "str", "min_duration": "posfloat", "min_queries": "posint", "samples_per_query": "posint"},
        ),
        (mlperf.run, (LOADGEN_SUT, "Server"), {"latency_bound": 0.1}, {"target_qps": "posfloat"}),
        (mlperf.run, (LOADGEN_SUT, "Offline"), {}, {"expected_qps": "posfloat"}),
        (mlperf.SUT, (lambda s: s, [1, 2]), {}, {"predict": "callable", "max_batch": "posint", "samples": "samples"}),
        (processes.sizes, (2,), {}, {"cores": "posint"}),
        (processes.Workers, (processes.digits_resnet_call, 1), {}, {"factory": "callable", "n": "posint"}),
        (
            onnxrt.export,
            (TINY, torch.ones(2, 4), "probe"),
            {"folder": _PROBE_DIR},
            {"example": "example", "model": "exportable"},
        ),
        (onnxrt.graph_summary, (RELU_FILE,), {}, {"path": "onnxpath"}),
        (onnxrt.profile_ops, (RELU_FILE, np.ones(1, dtype=np.float32)), {"calls": 1}, {"path": "onnxpath"}),
        (RELU.numpy, (np.ones(1, dtype=np.float32),), {}, {"x": "ortinput"}),
        (
            onnxrt.quantize,
            (RELU_FILE, "static"),
            {"calibration": [np.ones(1, dtype=np.float32)]},
            {"calibration": "calibration"},
        ),
        # plotting
        (plotting.bars, ([M, M2],), {}, {"measurements": "measurements"}),
        (plotting.vs_batch, ([1, 2], [M, M2]), {}, {"batches": "batches", "measurements": "measurements"}),
        (plotting.waterfall, (["a", "b"], [1.0, 2.0]), {}, {"steps": "batches", "values": "posfloats"}),
    ]
    import inspect

    cases = []
    for fn, args, kwargs, params in specs:
        signature = inspect.signature(fn)
        names = list(signature.parameters)
        for param, kind in params.items():
            if kind is None:
                continue
            optional = kind.endswith("?")
            for bad in BAD[kind.rstrip("?")]:
                if optional and bad is None:
                    continue
                call_args, call_kwargs = list(args), dict(kwargs)
                assert param in names, f"{fn.__qualname__} has no argument {param!r}: {names}"
                index = names.index(param)
                if index < len(call_args):
                    call_args[index] = bad
                else:
                    call_kwargs[param] = bad
                case_id = f"{fn.__qualname__}({param}={_short(bad)})"
                cases.append((case_id, fn, tuple(call_args), call_kwargs))
    return cases


def _short(value):
    text = repr(value) if not isinstance(value, torch.Tensor) else f"tensor{tuple(value.shape)}"
    return text if len(text) <= 24 else text[:21] + "..."


class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang


def classify(fn, args, kwargs, seconds=10):
    """clear / raw / deep / hang / wrong, as the review classified, and the message."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        fn(*args, **kwargs)
    except _Hang:
        return "hang", f"no answer in {seconds} s"
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        last = frames[-1].filename if frames else ""
        message = str(exc)
        if not last.startswith(HELPERS):
            return "deep", f"{type(exc).__name__} in {Path(last).name}: {message[:120]}"
        line = frames[-1].line or ""
        deliberate = line.lstrip().startswith("raise") or "check_" in line or "_fail(" in line
        if deliberate and "\n" not in message.strip() and len(message) > 20:
            return "clear", message
        return "raw", f"{type(exc).__name__}: {message[:160]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return "wrong", "returned normally"


CASES = _cases()


def test_the_probe_is_big_enough():
    assert len(CASES) >= 600, f"{len(CASES)} cases"


@pytest.fixture(scope="module")
def outcomes():
    import warnings

    import matplotlib.pyplot as plt

    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bad value may warn before it is refused: the refusal is judged
        for case_id, fn, args, kwargs in CASES:
            found[case_id] = classify(fn, args, kwargs)
            plt.close("all")
    counts = Counter(kind for kind, _ in found.values())
    print(f"\nbad-input probe: {len(found)} cases: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    return found


def test_bad_input_gets_a_clear_error(outcomes):
    counts = Counter(kind for kind, _ in outcomes.values())
    share = counts["clear"] / len(outcomes)
    others = [f"{case}: {kind}: {why}" for case, (kind, why) in outcomes.items() if kind != "clear"]
    assert share >= 0.95, f"{share:.1%} clear ({dict(counts)}); not clear:\n" + "\n".join(others[:60])


def test_no_bad_input_is_silently_accepted_and_none_hangs(outcomes):
    bad = [f"{case}: {why}" for case, (kind, why) in outcomes.items() if kind in ("wrong", "hang")]
    assert not bad, f"{len(bad)} accepted or hung:\n" + "\n".join(bad[:80])


def test_the_classifier_tells_the_classes_apart():
    from helpers.checks import check_int

    assert classify(check_int, ("n", 0), {})[0] == "clear"
    assert classify(lambda: None, (), {})[0] == "wrong"
    assert classify(torch.ones, ("x",), {})[0] == "deep"
    assert classify(math.sqrt, (-1,), {})[0] == "deep"


def test_a_metric_cannot_overwrite_a_column_of_the_table():
    with pytest.raises(ValueError, match="would overwrite a column") as info:
        results.make_record(M, notebook="00_x", experiment="e", variant="v", metrics={"device": 1.0})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="'throughput'"):
        results.make_record(M, notebook="00_x", experiment="e", variant="v", metrics={"throughput": 5.0})
    # a record written before the rule keeps both values, under two names
    old = results.make_record(M, notebook="00_x", experiment="e", variant="v", metrics={"images_per_s": 5.0})
    old["metrics"] = {"throughput": 5.0, "device": 1.0}
    frame = results.to_frame([old])
    assert frame.loc[0, "metric_throughput"] == 5.0
    assert frame.loc[0, "throughput"] == pytest.approx(M.throughput)
    assert frame.loc[0, "device"] == "cpu"
    assert frame.loc[0, "metric_device"] == 1.0


def test_sweep_refuses_inputs_that_are_not_the_batch_it_counts():
    with pytest.raises(ValueError, match=r"make_input\(4\) gave \(1, 4\), not a batch of 4"):
        batching.sweep(TINY, lambda b: torch.ones(1, 4), [1, 4], repeats=3, number=1)


def test_the_stderr_filter_passes_lines_on_before_the_process_dies():
    import subprocess
    import sys
    import threading

    # The child stays alive (waiting on stdin) until the parent has seen its line on stderr, then dies inside the
    # block: no sleep to race against, and a filter that held lines back until the block ended would hang here
    # until the watchdog kills the child, and fail.
    code = (
        "import os, sys\nfrom helpers.noise import profiler_markers_silenced\n"
        "with profiler_markers_silenced():\n"
        "    os.write(2, b'USDT:x SyncActivityProfilerHandler.cpp:39] profiler_start\\nkeep me\\n')\n"
        "    sys.stdin.readline()\n"
        "    os._exit(3)  # dies inside the block, as a crash in native code would\n"
    )
    seen = []
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    ) as proc:
        watchdog = threading.Timer(60, proc.kill)
        watchdog.start()
        try:
            for line in proc.stderr:
                seen.append(line)
                if line == "keep me\n":
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                    break
            seen.append(proc.stderr.read())
        finally:
            watchdog.cancel()
    assert proc.returncode == 3, "".join(seen)
    assert "keep me\n" in seen
    assert "profiler_start" not in "".join(seen)


def test_the_stderr_filter_keeps_the_last_words_of_a_process_killed_at_once():
    """What a process writes just before it dies inside the filter (a native crash's message, without its newline)
    reaches stderr: the forwarder outlives the process (where grep exists), and is not a thread killed with it."""
    import shutil
    import subprocess
    import sys

    if shutil.which("grep") is None:
        pytest.skip("no grep here: the filter forwards from a thread, which dies with its process")
    code = (
        "import os\nfrom helpers.noise import profiler_markers_silenced\n"
        "with profiler_markers_silenced():\n"
        "    os.write(2, b'USDT:x SyncActivityProfilerHandler.cpp:39] profiler_start\\nfatal: last words')\n"
        "    os._exit(3)  # no time for anyone to forward it\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert "fatal: last words" in done.stderr
    assert "profiler_start" not in done.stderr


@pytest.mark.parametrize(
    "script, args",
    [
        ("verdict_rates.py", ["--runs", "-1"]),
        ("verdict_rates.py", ["--budget", "nan"]),
        ("run_notebook.py", ["x.ipynb", "--timeout", "0"]),
        ("runtimes.py", ["--timeout", "-5"]),
    ],
)
def test_scripts_refuse_a_bad_number_with_a_usage_line(script, args):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error: argument" in proc.stderr.strip().splitlines()[-1]


def test_time_together_names_an_option_it_does_not_take():
    from helpers.verdict import time_together

    with pytest.raises(TypeError, match="its options are interleaved's") as info:
        time_together({"a": lambda: None}, bogus=1)
    assert "\n" not in str(info.value)


def test_a_record_that_json_cannot_hold_is_refused_when_made():
    with pytest.raises(ValueError, match="cannot be stored as JSON"):
        results.make_record(notebook="nb", experiment="e", variant="v", metrics={"x": 1.0}, extra={"o": object()})
