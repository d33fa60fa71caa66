"""The course's models: a small classifier trained on the shipped digits, a ResNet-10 trained on the same digits
upscaled (the capstone's real-size model, served at a size that fits the device), and torchvision architectures
built with ``weights=None`` (no download; random weights are fine for timing, and the trained models are the
ones used wherever accuracy matters)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .checks import (
    check_callable,
    check_finite,
    check_instance,
    check_int,
    check_labels,
    check_number,
    check_tensor,
)
from .device import DeviceLike, choose_device
from .paths import DATA_DIR, verify_shipped

DIGITS_CHECKPOINT = DATA_DIR / "digits_cnn.pt"
DIGITS_METRICS = DATA_DIR / "digits_cnn.json"
RESNET_CHECKPOINT = DATA_DIR / "digits_resnet.pt"
RESNET_METRICS = DATA_DIR / "digits_resnet.json"
#: The input size (pixels per side) the ResNet is served at: ~0.13 GFLOP per image at 16×16 keeps a 2-core CPU
#: within a notebook's budget; ~1.1 GFLOP per image at 48×48 gives a GPU a batch of real arithmetic (the capstone
#: review's arithmetic: the 0.68 MFLOP digits CNN left an H200 waiting on kernel launches).
RESNET_SIZES = {"cpu": 16, "gpu": 48}


class DigitsCNN(nn.Module):
    """Two 3×3 convolutions, a 2×2 max-pool and two linear layers: 8×8 grey digit → 10 logits (~40k params)."""

    def __init__(self, width: int = 16, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        check_int("width", width, hint="pass the first convolution's channels, e.g. 16")
        check_int("hidden", hidden, hint="pass the hidden layer's width, e.g. 64")
        check_int("num_classes", num_classes, minimum=2, hint="a classifier needs at least 2 classes, e.g. 10")
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * 4 * 4, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class DigitsMLP(nn.Module):
    """A wide MLP on the flattened 8×8 digits: 64 → hidden → hidden → 10. Most of its time and bytes are in
    the hidden × hidden matrix, which makes it the course's "large layers" model."""

    def __init__(self, hidden: int = 1024, num_classes: int = 10) -> None:
        super().__init__()
        check_int("hidden", hidden, hint="pass the hidden layers' width, e.g. 1024")
        check_int("num_classes", num_classes, minimum=2, hint="a classifier needs at least 2 classes, e.g. 10")
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class DigitsResNet(nn.Module):
    """ResNet-10 for the grey digits: torchvision's ``ResNet`` with one ``BasicBlock`` per stage (64, 128, 256,
    512 channels; each convolution followed by batch norm, each block ending in a residual add and a ReLU), a
    CIFAR-style stem (one 3×3 convolution on the grey channel, no max-pool) and 10 classes: 4.9 M parameters.
    It is convolutional up to a global average pool, so one set of weights serves any input size: ~0.13 GFLOP per
    image at 16×16, ~1.1 at 48×48 (trained at 16 to 48: :data:`RESNET_SIZES`)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        from torchvision.models.resnet import BasicBlock, ResNet

        check_int("num_classes", num_classes, minimum=2, hint="a classifier needs at least 2 classes, e.g. 10")

        self.net = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=num_classes)
        self.net.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
        self.net.maxpool = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def resnet_size(device: DeviceLike = None) -> int:
    """The input size the ResNet is served at on ``device``: :data:`RESNET_SIZES` ``["gpu"]`` on a CUDA GPU,
    ``["cpu"]`` elsewhere (a CPU, or Apple's MPS, whose budget is a laptop's)."""
    return RESNET_SIZES["gpu" if choose_device(device).type == "cuda" else "cpu"]


def digits_resnet(device: DeviceLike = None, trained: bool = True, size: int | None = None) -> DigitsResNet:
    """The digits ResNet in eval mode, float32, with the shipped trained weights (stored in bfloat16, loaded
    ``weights_only=True`` after their checksum) and the batch-norm statistics measured at ``size`` (default:
    :func:`resnet_size` of ``device``): the same weights for every size, each size its own running mean and
    variance. ``data/digits_resnet.json`` has the accuracy they reach."""
    check_instance("trained", trained, bool, hint="pass True for the shipped weights, False for random ones")
    dev = choose_device(device)
    size = resnet_size(dev) if size is None else size
    torch.manual_seed(0)
    model = DigitsResNet()
    if trained:
        verify_shipped(RESNET_CHECKPOINT, DATA_DIR)
        saved = torch.load(RESNET_CHECKPOINT, map_location="cpu", weights_only=True)
        if str(size) not in saved["batch_norm"]:
            raise ValueError(
                f"size={size!r}: batch norm was calibrated at {', '.join(sorted(saved['batch_norm'], key=int))} "
                "pixels only; pass one of those (helpers.models.RESNET_SIZES)."
            )
        state = {k: v.float() if v.is_floating_point() else v for k, v in saved["weights"].items()}
        model.load_state_dict(state | saved["batch_norm"][str(size)])
    return model.eval().to(dev)


def resnet_metrics() -> dict[str, Any]:
    """What ``scripts/train_resnet.py`` measured when it made the shipped weights (accuracy at each served size,
    FLOPs per image, training time, …)."""
    return json.loads(verify_shipped(RESNET_METRICS, DATA_DIR).read_text())


def train_classifier(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    epochs: int = 20,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    shift_augment: bool = True,
) -> nn.Module:
    """Train ``model`` on digit images (N×1×8×8) with AdamW and a cosine schedule; returns it in eval mode.

    ``shift_augment`` rolls each batch by up to one pixel so the model does not memorise positions.
    """
    check_instance("model", model, nn.Module, hint="pass the model to train, e.g. DigitsCNN()")
    check_tensor("images", images, hint="pass the training images, N×1×8×8, e.g. load_digits('train')[0]")
    check_finite("images", images, hint="NaN or infinite pixels would make every weight NaN")
    check_labels("labels", labels, 2**31, hint="pass one class index per image, a 1-d integer tensor")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels: pass one label per image.")
    check_number("lr", lr, positive=True, hint="pass the learning rate, e.g. 2e-3")
    check_int("epochs", epochs, hint="pass how many passes over the training images, e.g. 20")
    check_int("batch_size", batch_size, hint="pass how many images per optimiser step, e.g. 64")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    from .progress import bar

    shown = bar(total=epochs, desc=f"training {type(model).__name__}", unit="epoch")
    for epoch in range(epochs):
        shown.update(1)
        perm = torch.randperm(len(images), generator=generator)
        for start in range(0, len(perm), batch_size):
            idx = perm[start : start + batch_size]
            xb = images[idx]
            if shift_augment:
                shifts = tuple(torch.randint(-1, 2, (2,), generator=generator).tolist())
                xb = torch.roll(xb, shifts=shifts, dims=(2, 3))
            out = model(xb.to(device))
            if epoch == 0 and start == 0:  # the model's output says how many classes the labels may name
                check_labels("labels", labels, out.shape[1], hint="pass class indices the model has outputs for")
            loss = loss_fn(out, labels[idx].to(device))
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"the training loss became {loss.item()} in epoch {epoch + 1}: stopped before every weight is "
                    f"NaN; lower lr (now {lr}) or check the images and labels."
                )
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    shown.close()
    return model.eval()


def trained_once(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, **options: Any
) -> tuple[nn.Module, str | None]:
    """:func:`train_classifier`, kept: the trained weights are saved under ``outputs/trained/`` (atomically), keyed
    by the architecture, the data, ``options`` (epochs, seed, …), the device type and torch's version, and a later
    run with the same key loads them instead of training again. Returns ``(model, path it was loaded from)`` or
    ``(model, None)`` when it was trained now. A file that does not load (damaged, another format) is trained
    again and replaced: nothing a learner needs is lost."""
    import hashlib
    import pickle

    from .paths import atomic_path, output_subdir

    check_instance("model", model, nn.Module, hint="pass the model to train, e.g. DigitsMLP(1024)")
    device = next(model.parameters()).device
    key = hashlib.sha256()
    for part in (repr(model), sorted(options.items()), device.type, torch.__version__):
        key.update(repr(part).encode())
    for tensor in (images, labels):
        key.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    path = output_subdir("trained") / f"{type(model).__name__}-{key.hexdigest()[:16]}.pt"
    if path.exists():
        try:
            model.load_state_dict(torch.load(path, map_location=device, weights_only=True))
            return model.eval(), str(path)
        except (RuntimeError, OSError, EOFError, ValueError, KeyError, pickle.UnpicklingError):  # damaged: again
            pass
    model = train_classifier(model, images, labels, **options)
    with atomic_path(path) as tmp:
        torch.save(model.state_dict(), tmp)
    return model, None


def digits_classifier(device: DeviceLike = None, trained: bool = True) -> DigitsCNN:
    """The digits classifier in eval mode, with the shipped trained weights (loaded ``weights_only=True``)."""
    check_instance("trained", trained, bool, hint="pass True for the shipped weights, False for random ones")
    model = DigitsCNN()
    if trained:
        verify_shipped(DIGITS_CHECKPOINT, DATA_DIR)  # one flipped bit took accuracy from 98.6 % to 22.2 %, silently
        state = torch.load(DIGITS_CHECKPOINT, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    return model.eval().to(choose_device(device))


def digits_metrics() -> dict[str, Any]:
    """What the training script measured when it made the checkpoint (test accuracy, epochs, …)."""
    return json.loads(verify_shipped(DIGITS_METRICS, DATA_DIR).read_text())


def torchvision_model(name: str = "resnet18", device: DeviceLike = None, **kwargs: Any) -> nn.Module:
    """A torchvision architecture by name with random weights (``weights=None``: nothing is downloaded)."""
    import torchvision

    available = torchvision.models.list_models(module=torchvision.models)
    if name not in available:
        raise ValueError(f"unknown torchvision model {name!r}; try one of: resnet18, resnet50, mobilenet_v3_small.")
    if "num_classes" in kwargs:
        check_int("num_classes", kwargs["num_classes"], minimum=2, hint="a classifier needs at least 2 classes")
    torch.manual_seed(0)
    try:
        model = torchvision.models.get_model(name, weights=None, **kwargs)
    except TypeError as exc:  # an argument the architecture does not take
        raise TypeError(f"torchvision's {name} does not take {sorted(kwargs)} ({exc}).") from None
    return model.eval().to(choose_device(device))


def _correct(logits: torch.Tensor, labels: torch.Tensor) -> int:
    """How many rows of ``logits`` have their largest value at the row's label (top-1 hits). NaN logits (a
    broken model or input) and labels outside the logits' classes have no accuracy: refused."""
    if logits.dim() != 2 or len(logits) != len(labels):
        raise ValueError(
            f"the model gave logits of shape {tuple(logits.shape)} for {len(labels)} images: it must return one row "
            "of class scores per image."
        )
    if bool(torch.isnan(logits).any()):
        raise ValueError("the logits hold NaN (a broken model, or NaN in its input): accuracy is undefined.")
    check_labels("labels", labels, logits.shape[1], hint="pass the class index of each image")
    return int((logits.argmax(dim=1).cpu() == labels.cpu()).sum())


@torch.inference_mode()
def accuracy(
    model: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int = 512,
    *,
    logits: torch.Tensor | None = None,
) -> float:
    """Top-1 accuracy of ``model`` on ``images``/``labels``: the share of images whose largest logit is at
    their label. The course's one definition of accuracy.

    ``model`` (a module, or any function from a batch to logits) runs over ``images`` in batches, on the
    device of its parameters (a plain function: that of ``images``). When its logits on ``images`` are
    already computed (``harness.evaluate`` needs them for the agreement too), pass them as ``logits``: they are
    scored and nothing runs again."""
    if logits is not None:
        if logits.dim() != 2 or len(logits) != len(labels) or len(labels) == 0:
            raise ValueError(
                f"logits of shape {tuple(logits.shape)} do not match {len(labels)} labels: pass one "
                "row of class scores per label."
            )
        return _correct(logits, labels) / len(labels)
    check_callable("model", model, hint="pass the model whose accuracy is measured, or its logits as logits=")
    check_int("batch_size", batch_size, hint="pass how many images per forward pass, e.g. 512")
    check_tensor("images", images, hint="pass the images to classify, e.g. load_digits('test')[0]")
    check_tensor("labels", labels, ndim=1, hint="pass one class index per image, a 1-d tensor")
    check_finite("images", images, hint="NaN or infinite pixels have no class")
    if len(images) != len(labels) or len(images) == 0:
        raise ValueError("images and labels must be non-empty and of the same length.")
    weight = next(model.parameters(), None) if isinstance(model, nn.Module) else None
    device = weight.device if weight is not None else images.device
    correct = 0
    for start in range(0, len(images), batch_size):
        correct += _correct(model(images[start : start + batch_size].to(device)), labels[start : start + batch_size])
    return correct / len(images)
