"""Train the course's small digits classifier (helpers.models.DigitsCNN) on data/digits.pt and write
data/digits_cnn.pt (a state_dict, loadable with weights_only=True) and data/digits_cnn.json (what was
measured). Seconds on a CPU; deterministic for a given machine and torch version.

    .venv/bin/python scripts/train_digits.py
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.data import load_digits  # noqa: E402
from helpers.models import DIGITS_CHECKPOINT, DIGITS_METRICS, DigitsCNN, accuracy, train_classifier  # noqa: E402
from helpers.paths import atomic_path, write_atomic  # noqa: E402

EPOCHS = 40
BATCH = 64
LR = 2e-3


def main() -> None:
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    model = train_classifier(DigitsCNN(), x_train, y_train, epochs=EPOCHS, batch_size=BATCH, lr=LR, seed=0)
    model.eval()
    test_acc = accuracy(model, x_test, y_test)
    train_acc = accuracy(model, x_train, y_train)
    with atomic_path(DIGITS_CHECKPOINT) as tmp:  # never half a checkpoint, even if interrupted
        torch.save(model.state_dict(), tmp)
    metrics = {
        "test_accuracy": test_acc,
        "test_correct": round(test_acc * len(y_test)),
        "test_size": len(y_test),
        "train_accuracy": train_acc,
        "parameters": sum(p.numel() for p in model.parameters()),
        "epochs": EPOCHS,
        "batch_size": BATCH,
        "optimizer": f"AdamW lr={LR} wd=1e-4, cosine schedule, ±1 px shift augmentation",
        "torch": torch.__version__,
        "trained_on": dt.date.today().isoformat(),
    }
    write_atomic(DIGITS_METRICS, json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics, indent=2))
    from make_data import write_checksums  # scripts/ is on sys.path when this file runs as a script

    write_checksums()


if __name__ == "__main__":
    main()
