"""fp32 means fp32 in one place (helpers.fp32): the legacy and per-op TF32 switches agree, torch.export runs after
the switch, the export helper copes with a hand-set mix and puts it back, and no notebook sets the flags by hand
outside notebook 02's TF32 lesson."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch

from helpers import onnxrt
from helpers.fp32 import (
    FLAGS,
    consistent_fp32_flags,
    cudnn_switches,
    exact_fp32,
    fp32_flags,
    set_fp32_flags,
    tf32_enabled,
)

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
HAND_SET = re.compile(r"torch\.backends\.[\w.]*\b(allow_tf32|fp32_precision)\s*=[^=]|set_float32_matmul_precision")
#: The one notebook whose lesson is the switch itself (its TF32 section), after its set-up cell.
TEACHES_TF32 = "02_precision_quantization"


@pytest.fixture
def restore_flags():
    saved = fp32_flags()
    yield
    set_fp32_flags(saved)


def _model():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(72, 3)).eval()


def test_a_hand_set_cudnn_flag_stops_torch_export_and_exact_fp32_does_not(restore_flags):
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # what six set-up cells did: the legacy getter now raises
    with pytest.raises(RuntimeError, match="allow_tf32"):
        torch.export.export(_model(), (torch.randn(2, 1, 8, 8),))
    exact_fp32()
    assert tf32_enabled() == {"matmul": False, "cudnn": False}
    assert all(fp32_flags()[name] == "ieee" for name in FLAGS)
    assert torch.get_float32_matmul_precision() == "highest"
    torch.export.export(_model(), (torch.randn(2, 1, 8, 8),))  # does not raise


def test_exact_fp32_is_idempotent_and_undoes_tf32(restore_flags):
    set_fp32_flags({"legacy cublas": True, "legacy cudnn": True, **dict.fromkeys(FLAGS, "tf32")})
    assert tf32_enabled() == {"matmul": True, "cudnn": True}
    exact_fp32()
    exact_fp32()
    assert tf32_enabled() == {"matmul": False, "cudnn": False}


@pytest.mark.parametrize("conv", ["ieee", "tf32", "none"])
@pytest.mark.parametrize("rnn", ["ieee", "tf32", "none"])
def test_the_export_helper_runs_on_any_mix_and_restores_both_kinds(tmp_path, restore_flags, conv, rnn):
    set_fp32_flags({"cudnn.conv": conv, "cudnn.rnn": rnn})
    before = fp32_flags()

    def restored() -> bool:  # every switch that could be read before (a mix hides the legacy cuDNN flag)
        after = fp32_flags()
        return all(after[name] == value for name, value in before.items())

    with consistent_fp32_flags():
        tf32_enabled()  # readable inside
    assert restored()
    onnxrt.export(_model(), torch.randn(2, 1, 8, 8), f"mix_{conv}_{rnn}", folder=tmp_path)
    assert restored()  # after the export too


def test_set_fp32_flags_refuses_unknown_names_in_one_line():
    with pytest.raises(ValueError, match="fp32_flags") as info:
        set_fp32_flags({"cudnn.matmul": "ieee"})
    assert "\n" not in str(info.value)


def test_the_replica_switches_tf32_off_without_importing_the_course():
    source = (Path(__file__).resolve().parents[1] / "helpers" / "_replica.py").read_text()
    assert "exact_fp32()" in source
    assert "spec_from_file_location" in source
    fp32_source = (Path(__file__).resolve().parents[1] / "helpers" / "fp32.py").read_text()
    assert not re.search(r"^from \.|^import helpers|^from helpers", fp32_source, re.MULTILINE)


def _setup_index(nb) -> int:
    params = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and i > params)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_switch_fp32_through_the_one_helper(path):
    nb = nbformat.read(path, as_version=4)
    setup = _setup_index(nb)
    assert "exact_fp32()" in nb.cells[setup].source, f"{path.stem}'s set-up cell must call helpers.exact_fp32()"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or (path.stem == TEACHES_TF32 and i > setup):
            continue
        found = HAND_SET.search(cell.source)
        assert not found, (
            f"{path.stem} cell {i} sets a TF32 flag by hand ({found.group(0).strip()}): call helpers.exact_fp32(), "
            "which keeps the legacy and per-op flags consistent (torch.export raises on a mix)"
        )


def test_the_flag_rule_catches_hand_set_flags():
    for code in (
        'torch.backends.cudnn.conv.fp32_precision = "ieee"',
        "torch.backends.cudnn.allow_tf32 = False",
        'torch.set_float32_matmul_precision("high")',
    ):
        assert HAND_SET.search(code)
    assert not HAND_SET.search('assert torch.backends.cuda.matmul.fp32_precision == "ieee"')


def test_notebook_05s_own_export_call_runs_after_the_gpu_set_up(tmp_path, restore_flags):
    """05's set-up cell calls exact_fp32() (on a GPU it sets every switch); its cell 5 then calls the exporter
    directly, not through the helper: the same call here, after the same switches."""
    set_fp32_flags({"legacy cublas": True, "legacy cudnn": True, **dict.fromkeys(FLAGS, "tf32")})  # a GPU's defaults
    exact_fp32()
    program = torch.onnx.export(
        _model(),
        (torch.randn(2, 1, 8, 8),),
        dynamo=True,
        input_names=["images"],
        output_names=["logits"],
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=65536)},),
        verbose=False,
    )
    program.save(str(tmp_path / "cell5.onnx"))
    assert (tmp_path / "cell5.onnx").stat().st_size > 0
    assert tf32_enabled() == {"matmul": False, "cudnn": False}


def test_cudnn_switches_set_both_apis_for_the_block_and_put_them_back():
    exact_fp32()
    before, benchmark = fp32_flags(), torch.backends.cudnn.benchmark
    with cudnn_switches(tf32=True, benchmark=True):
        assert tf32_enabled()["cudnn"]  # the legacy flag agrees (it raises where the two APIs disagree)
        assert fp32_flags()["cudnn.conv"] == "tf32"
        assert torch.backends.cudnn.benchmark
    assert fp32_flags() == before
    assert torch.backends.cudnn.benchmark == benchmark
    with cudnn_switches(tf32=False, benchmark=False):
        assert not tf32_enabled()["cudnn"]
        assert fp32_flags()["cudnn.conv"] == "ieee"
    assert fp32_flags() == before
