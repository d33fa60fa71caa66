import hashlib

import pytest
import torch
from conftest import one_line

from helpers import data, models
from helpers.paths import DATA_DIR


def test_shipped_files_match_their_checksums():
    lines = (DATA_DIR / "checksums.sha256").read_text().split("\n")
    entries = [line.split("  ", 1) for line in lines if line.strip()]
    assert len(entries) >= 8
    for digest, name in entries:
        assert hashlib.sha256((DATA_DIR / name).read_bytes()).hexdigest() == digest, name


def test_digits_split_is_fixed_disjoint_and_stratified():
    x_train, y_train = data.load_digits("train")
    x_test, y_test = data.load_digits("test")
    x_all, y_all = data.load_digits("all")
    assert x_all.shape == (1797, 1, 8, 8)
    assert x_all.dtype == torch.float32
    assert len(y_train) + len(y_test) == 1797
    assert len(y_test) == 360
    assert 0.0 <= float(x_all.min())
    assert float(x_all.max()) == 1.0
    raw = torch.load(data.DIGITS_FILE, weights_only=True)
    assert not set(raw["train_index"].tolist()) & set(raw["test_index"].tolist())
    counts = torch.bincount(y_test, minlength=10)
    assert counts.min() >= 34
    assert counts.max() <= 38  # every digit ~10 % of the test set


def test_digits_loader():
    batches = list(data.digits_loader("test", batch_size=100))
    assert [len(b[1]) for b in batches] == [100, 100, 100, 60]
    with pytest.raises(ValueError) as info:
        data.digits_loader("test", batch_size=0)
    assert one_line(info.value)
    with pytest.raises(ValueError):
        data.load_digits("validation")


def test_trained_classifier_reaches_its_recorded_accuracy():
    model = models.digits_classifier("cpu")
    assert not model.training
    metrics = models.digits_metrics()
    x, y = data.load_digits("test")
    acc = models.accuracy(model, x, y)
    assert acc >= 0.95
    assert abs(round(acc * len(y)) - metrics["test_correct"]) <= 1
    untrained = models.digits_classifier("cpu", trained=False)
    assert models.accuracy(untrained, x, y) < 0.5  # the checkpoint really is what makes it accurate


def test_accuracy_scores_logits_already_computed():
    labels = torch.tensor([1, 0, 2, 2])
    logits = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0], [5.0, 0.0, 3.0]])
    assert models.accuracy(None, None, labels, logits=logits) == 0.5
    assert models.accuracy(lambda rows: logits[rows], torch.arange(4), labels, batch_size=3) == 0.5  # any function
    with pytest.raises(ValueError, match="labels"):
        models.accuracy(None, None, labels, logits=logits[:3])


def test_torchvision_model_builds_without_download():
    model = models.torchvision_model("resnet18", "cpu")
    with torch.inference_mode():
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 1000)
    with pytest.raises(ValueError, match="unknown torchvision model"):
        models.torchvision_model("resnet19")


def test_photo_pipeline_decode_resize_normalise():
    paths = data.photo_paths()
    assert len(paths) == 6
    raw = data.read_photo(paths[0])
    assert raw.dtype == torch.uint8
    assert raw.shape[0] == 3
    assert min(raw.shape[1:]) >= 300
    ds = data.PhotoDataset(size=96, repeat=2)
    assert len(ds) == 12
    item = ds[7]
    assert item.shape == (3, 96, 96)
    assert item.dtype == torch.float32
    assert -3.0 < float(item.mean()) < 3.0
    assert float(item.std()) > 0.1  # normalised, not constant
    with pytest.raises(IndexError):
        ds[12]
    with pytest.raises(ValueError):
        data.PhotoDataset(repeat=0)


def test_train_classifier_learns_the_digits():
    x, y = data.load_digits("train")
    model = models.train_classifier(models.DigitsMLP(hidden=128), x, y, epochs=15, shift_augment=False)
    assert not model.training
    x_test, y_test = data.load_digits("test")
    assert models.accuracy(model, x_test, y_test) >= 0.9
    with pytest.raises(ValueError):
        models.train_classifier(models.DigitsMLP(hidden=8), x, y, epochs=0)


# -- shipped data is verified when loaded -------------------------------------------------------------------


def _fake_data(tmp_path, monkeypatch, flip: bool = False, truncate: bool = False, remove: bool = False):
    import shutil

    root = tmp_path / "data"
    root.mkdir()
    shutil.copy(DATA_DIR / "checksums.sha256", root / "checksums.sha256")
    checkpoint = root / "digits_cnn.pt"
    blob = bytearray((DATA_DIR / "digits_cnn.pt").read_bytes())
    if flip:
        blob[len(blob) // 2] ^= 0x01  # one bit, in the middle of the weights
    if truncate:
        blob = blob[: len(blob) // 2]
    if not remove:
        checkpoint.write_bytes(bytes(blob))
    monkeypatch.setattr(models, "DATA_DIR", root)
    monkeypatch.setattr(models, "DIGITS_CHECKPOINT", checkpoint)
    return models


@pytest.mark.parametrize("fault", ["flip", "truncate", "remove"])
def test_an_altered_truncated_or_missing_checkpoint_is_refused_in_one_line(tmp_path, monkeypatch, fault):
    from helpers.paths import ShippedDataError

    models = _fake_data(tmp_path, monkeypatch, **{fault: True})
    with pytest.raises(ShippedDataError, match="git checkout data/") as info:
        models.digits_classifier()
    assert one_line(info.value)


def test_an_intact_copy_loads_and_the_check_runs_once(tmp_path, monkeypatch):
    models = _fake_data(tmp_path, monkeypatch)
    calls = []
    original = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a: (calls.append(1), original(*a))[1])
    models.digits_classifier()
    models.digits_classifier()
    assert len(calls) == 1, "the checksum is computed once per process, not per load"


def test_a_shipped_photo_is_verified_and_a_missing_path_is_refused(tmp_path):
    from helpers.data import photo_paths, read_photo

    assert read_photo(photo_paths()[0]).dtype == torch.uint8
    with pytest.raises(FileNotFoundError, match="image file") as info:
        read_photo(tmp_path / "nope.jpg")
    assert one_line(info.value)


def test_the_capstone_resnet_is_real_size_at_both_served_sizes():
    """The issue's sizes: ≥ 50 MFLOP per image where a CPU serves it, ≥ ~1 GFLOP where a GPU does; one set of
    weights, fully convolutional, so both sizes give 10 logits."""
    from helpers.opcount import count_ops

    model = models.digits_resnet("cpu", trained=False)
    assert 4.5e6 < sum(p.numel() for p in model.parameters()) < 5.5e6
    raw, _ = data.load_digits_raw("test")
    for where, minimum in (("cpu", 50e6), ("gpu", 1.0e9)):
        x = data.upscale_digits(raw[:2], models.RESNET_SIZES[where])
        assert model(x).shape == (2, 10)
        assert count_ops(model, x[:1]).flops >= minimum, where
    assert models.resnet_size("cpu") == models.RESNET_SIZES["cpu"]


def test_the_shipped_resnet_reaches_its_recorded_accuracy_at_the_cpu_size():
    metrics = models.resnet_metrics()
    model = models.digits_resnet("cpu")
    assert not model.training
    assert all(p.dtype == torch.float32 for p in model.parameters())
    raw, labels = data.load_digits_raw("test")
    size = models.RESNET_SIZES["cpu"]
    acc = models.accuracy(model, data.upscale_digits(raw, size), labels)
    assert acc >= 0.97
    assert abs(acc - metrics["served"]["cpu"]["test_accuracy"]) <= 1.5 / len(labels)  # a digit of rounding
    gpu_size = models.RESNET_SIZES["gpu"]  # the same weights with the 48×48 statistics, measured here on the CPU
    at_48 = models.accuracy(models.digits_resnet("cpu", size=gpu_size), data.upscale_digits(raw, gpu_size), labels)
    assert at_48 >= 0.97
    assert abs(at_48 - metrics["served"]["gpu"]["test_accuracy"]) <= 1.5 / len(labels)
    untrained = models.digits_resnet("cpu", trained=False)
    assert models.accuracy(untrained, data.upscale_digits(raw, size), labels) < 0.5
    with pytest.raises(ValueError) as info:  # batch norm is calibrated at the served sizes only
        models.digits_resnet("cpu", size=32)
    assert one_line(info.value)
    assert "16, 48" in str(info.value)


def test_shifted_digits_move_each_digit_by_one_pixel():
    raw, labels = data.load_digits_raw("test")
    images, shifted_labels = data.shifted_digits("test")
    assert images.shape == (9 * len(raw), 8, 8)
    assert torch.equal(shifted_labels, labels.repeat(9))
    assert torch.equal(images[: len(raw)], raw)  # the unshifted copy first
    down = images[len(raw) * data.SHIFTS.index((1, 0)) :][: len(raw)]  # one row down: row 0 comes in as zeros
    assert torch.equal(down[:, 1:], raw[:, :-1])
    assert int(down[:, 0].abs().sum()) == 0
    with pytest.raises(ValueError) as info:
        data.shifted_digits("test", shifts=10)
    assert one_line(info.value)


def test_upscaled_digits_are_the_models_input():
    raw, _ = data.load_digits_raw("test")
    x = data.upscale_digits(raw[:3], 16)
    assert x.shape == (3, 1, 16, 16)
    assert x.dtype == torch.float32
    assert 0.0 <= float(x.min())
    assert float(x.max()) <= 1.0
    with pytest.raises(ValueError) as info:
        data.upscale_digits(raw[:3], 4)
    assert one_line(info.value)


def test_digit_jpegs_are_built_once_and_decode_to_the_models_input(tmp_path, monkeypatch):
    import io

    import numpy as np
    from PIL import Image

    monkeypatch.setenv("COURSE_OUTPUTS", str(tmp_path))
    paths, labels = data.digits_jpegs(16)
    raw, test_labels = data.load_digits_raw("test")
    assert len(paths) == len(raw)
    assert torch.equal(labels, test_labels)
    decoded = np.array(Image.open(io.BytesIO(paths[5].read_bytes())))  # a writable copy
    assert decoded.shape == (16, 16)
    assert decoded.dtype == np.uint8
    exact = data.upscale_digits(raw[5:6], 16)[0, 0] * 255
    assert float((torch.from_numpy(decoded).float() - exact).abs().mean()) < 8  # JPEG's loss, small at q90
    stamp = paths[0].stat().st_mtime_ns
    assert data.digits_jpegs(16)[0] == paths
    assert paths[0].stat().st_mtime_ns == stamp  # reused, not rebuilt
    paths[3].unlink()  # an incomplete folder is rebuilt whole
    again, _ = data.digits_jpegs(16)
    assert again[3].is_file()
    assert len(list(again[0].parent.iterdir())) == len(raw)
    assert not [p for p in again[0].parent.parent.iterdir() if p.name.startswith(again[0].parent.name + ".")]


def test_the_resnet_training_script_runs_and_writes_what_it_measured(tmp_path):
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(DATA_DIR.parent / "scripts" / "train_resnet.py"), "--toy", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    metrics = json.loads((tmp_path / "digits_resnet.json").read_text())
    assert set(metrics["served"]) == {"cpu", "gpu"}
    assert metrics["epochs"] == 1
    saved = torch.load(tmp_path / "digits_resnet.pt", weights_only=True)
    assert all(v.dtype == torch.bfloat16 for v in saved["weights"].values() if v.is_floating_point())
    assert set(saved["batch_norm"]) == {str(s) for s in models.RESNET_SIZES.values()}  # one set per served size
    weights = {k: v.float() if v.is_floating_point() else v for k, v in saved["weights"].items()}
    models.DigitsResNet().load_state_dict(weights | saved["batch_norm"]["16"])


def test_nan_logits_labels_outside_the_classes_and_a_diverging_training_are_refused():
    images, labels = torch.ones(4, 4), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="logits hold NaN"):
        models.accuracy(None, images, labels, logits=torch.full((4, 2), float("nan")))
    with pytest.raises(ValueError, match=r"class indices in 0…1"):
        models.accuracy(torch.nn.Linear(4, 2), images, torch.full((4,), 5))
    with pytest.raises(FloatingPointError, match="training loss became"):
        huge, model = torch.full((4, 4), 3e38), torch.nn.Linear(4, 2)  # finite inputs whose logits overflow
        with torch.no_grad():
            model.weight.fill_(1.0)  # every logit 4 × 3e38 = inf: the loss is NaN from the first step
        models.train_classifier(model, huge, labels, epochs=1, shift_augment=False)
    with pytest.raises(ValueError, match="not raw digits"):
        data.digits_to_float(torch.zeros(2, 8, 8))


def test_a_model_trained_once_is_loaded_by_the_next_run_and_a_damaged_file_is_trained_again():
    from helpers.models import DigitsMLP, trained_once

    x, y = data.load_digits("train")
    x, y = x[:128], y[:128]
    first, loaded = trained_once(DigitsMLP(16), x, y, epochs=1)
    assert loaded is None
    second, loaded = trained_once(DigitsMLP(16), x, y, epochs=1)
    pairs = zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    assert loaded
    assert all(torch.equal(a, b) for a, b in pairs)
    _, other = trained_once(DigitsMLP(16), x, y, epochs=2)  # other settings: another key, trained
    assert other is None
    with open(loaded, "wb") as damaged:
        damaged.write(b"not a checkpoint")
    _, again = trained_once(DigitsMLP(16), x, y, epochs=1)
    assert again is None  # trained again, and replaced: the next run loads it
    assert trained_once(DigitsMLP(16), x, y, epochs=1)[1] == loaded
