"""Regenerate data/digits.pt and data/photos/*.jpg from the copies that ship inside scikit-learn and
scikit-image (no network), then data/checksums.sha256.

    .venv/bin/pip install -r scripts/requirements-data.txt
    .venv/bin/python scripts/make_data.py

Then retrain the classifier: .venv/bin/python scripts/train_digits.py
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.paths import atomic_path, write_atomic  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"

# name in skimage.data → (file name, licence as stated in scikit-image's documentation)
PHOTOS = {
    "astronaut": ("astronaut.jpg", "public domain (NASA)"),
    "chelsea": ("chelsea.jpg", "CC0 (Stefan van der Walt)"),
    "coffee": ("coffee.jpg", "CC0 (Rachel Michetti)"),
    "rocket": ("rocket.jpg", "public domain (SpaceX)"),
    "hubble_deep_field": ("hubble_deep_field.jpg", "public domain (NASA)"),
    "retina": ("retina.jpg", "CC0 (Mikael Häggström)"),
}
MAX_SIDE = 1024  # keeps data/ to a few MB while staying larger than any model input


def make_digits() -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.uint8)  # values 0..16
    labels = digits.target.astype(np.uint8)
    train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=0.2, stratify=labels, random_state=0)
    with atomic_path(DATA / "digits.pt") as tmp:
        torch.save(
            {
                "images": torch.from_numpy(images),
                "labels": torch.from_numpy(labels),
                "train_index": torch.from_numpy(np.sort(train_idx)),
                "test_index": torch.from_numpy(np.sort(test_idx)),
            },
            tmp,
        )
    print(f"digits.pt: {len(labels)} images, {len(train_idx)} train / {len(test_idx)} test")


def make_photos() -> None:
    import skimage.data

    out = DATA / "photos"
    out.mkdir(parents=True, exist_ok=True)
    for name, (file, licence) in PHOTOS.items():
        image = Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
        image.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
        with atomic_path(out / file) as tmp:
            image.save(tmp, quality=88, optimize=True)
        print(f"photos/{file}: {image.size[0]}×{image.size[1]}, {licence}")


def write_checksums() -> None:
    files = sorted(
        p
        for p in DATA.rglob("*")
        if p.is_file() and p.suffix in {".pt", ".jpg", ".json", ".txt"} and "reference" not in p.parts
    )
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(DATA)}" for p in files]
    write_atomic(DATA / "checksums.sha256", "\n".join(lines) + "\n")
    print(f"checksums.sha256: {len(lines)} files")


if __name__ == "__main__":
    make_digits()
    make_photos()
    write_checksums()
