"""The course's models: a small classifier trained on the shipped digits, and torchvision architectures
built with ``weights=None`` (no download; random weights are fine for timing, and the digits classifier is
the one used wherever accuracy matters)."""

from __future__ import annotations

import json
from typing import Any

import torch
from torch import nn

from .device import DeviceLike, choose_device
from .paths import DATA_DIR

DIGITS_CHECKPOINT = DATA_DIR / "digits_cnn.pt"
DIGITS_METRICS = DATA_DIR / "digits_cnn.json"


class DigitsCNN(nn.Module):
    """Two 3×3 convolutions, a 2×2 max-pool and two linear layers: 8×8 grey digit → 10 logits (~40k params)."""

    def __init__(self, width: int = 16, hidden: int = 64, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * width * 4 * 4, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def digits_classifier(device: DeviceLike = None, trained: bool = True) -> DigitsCNN:
    """The digits classifier in eval mode, with the shipped trained weights (loaded ``weights_only=True``)."""
    model = DigitsCNN()
    if trained:
        if not DIGITS_CHECKPOINT.exists():
            raise FileNotFoundError(
                f"{DIGITS_CHECKPOINT} is missing; restore it with `git checkout data/` "
                "or rebuild it with `python scripts/train_digits.py`."
            )
        state = torch.load(DIGITS_CHECKPOINT, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    return model.eval().to(choose_device(device))


def digits_metrics() -> dict[str, Any]:
    """What the training script measured when it made the checkpoint (test accuracy, epochs, …)."""
    return json.loads(DIGITS_METRICS.read_text())


def torchvision_model(name: str = "resnet18", device: DeviceLike = None, **kwargs: Any) -> nn.Module:
    """A torchvision architecture by name with random weights (``weights=None``: nothing is downloaded)."""
    import torchvision

    available = torchvision.models.list_models(module=torchvision.models)
    if name not in available:
        raise ValueError(f"unknown torchvision model {name!r}; try one of: resnet18, resnet50, mobilenet_v3_small.")
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, **kwargs)
    return model.eval().to(choose_device(device))


@torch.inference_mode()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 512) -> float:
    """Top-1 accuracy of ``model`` on ``images``/``labels`` (evaluated in batches, on the model's device)."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be at least 1.")
    if len(images) != len(labels) or len(images) == 0:
        raise ValueError("images and labels must be non-empty and of the same length.")
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, len(images), batch_size):
        x = images[start:start + batch_size].to(device)
        pred = model(x).argmax(dim=1).cpu()
        correct += int((pred == labels[start:start + batch_size]).sum())
    return correct / len(images)
