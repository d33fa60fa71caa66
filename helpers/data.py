"""The data shipped in ``data/``, loaded with standard torch / torchvision APIs and no network.

* ``digits.pt``: scikit-learn's handwritten digits (1797 8×8 grey images, 17 grey levels, CC BY 4.0) as
  uint8 tensors, with a fixed stratified train/test split;
* ``photos/*.jpg``: six public-domain / CC0 photographs from scikit-image, for a real decode → resize →
  normalise input pipeline;
* ``stdlib_docstrings.txt``: the docstrings of Python's standard library (PSF licence), the text the course's
  small language models are trained on, read as bytes (one token per byte).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from .checks import check_choice, check_int, check_tensor
from .paths import DATA_DIR, verify_shipped

DIGITS_FILE = DATA_DIR / "digits.pt"
PHOTOS_DIR = DATA_DIR / "photos"
CORPUS = DATA_DIR / "stdlib_docstrings.txt"
CORPUS_SEPARATOR = "\n\n\f\n"  # between two docstrings
HELD_OUT = 0.05  # the last 5 % of the documents: never trained on
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SPLITS = ("train", "test", "all")


def _digits_raw() -> dict[str, torch.Tensor]:
    verify_shipped(DIGITS_FILE, DATA_DIR)  # a missing or altered file stops here, with how to restore it
    return torch.load(DIGITS_FILE, weights_only=True)


def load_digits_raw(split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)`` as stored: images uint8 ``N×8×8`` with values 0…16 (what a request would carry),
    labels int64 in 0…9. :func:`digits_to_float` turns a batch of such images into the model's input."""
    check_choice("split", split, SPLITS, hint="'all' is train and test together")
    raw = _digits_raw()
    index = torch.arange(len(raw["labels"])) if split == "all" else raw[f"{split}_index"]
    return raw["images"][index], raw["labels"][index].to(torch.int64)


def digits_to_float(images: torch.Tensor) -> torch.Tensor:
    """Raw digits (uint8 ``N×8×8``, 0…16) → the models' input: float32 ``N×1×8×8`` scaled to [0, 1]."""
    hint = "pass raw digits, N×8×8 uint8 in 0…16, as load_digits_raw returns"
    check_tensor("images", images, ndim=3, hint=hint)
    if images.is_floating_point() or images.dtype == torch.bool or tuple(images.shape[1:]) != (8, 8):
        raise ValueError(
            f"images of {images.dtype} and shape {tuple(images.shape)} are not raw digits (already converted?): {hint}."
        )
    low, high = int(images.min()), int(images.max())
    if low < 0 or high > 16:
        raise ValueError(f"images range from {low} to {high}, outside the digits' 0…16: {hint}.")
    return images.to(torch.float32).div(16.0).unsqueeze(1)


def upscale_digits(images: torch.Tensor, size: int) -> torch.Tensor:
    """Raw digits (uint8 ``N×8×8``, 0…16) → the ResNet's input at ``size``×``size``: float32 ``N×1×size×size`` in
    [0, 1], bilinear (``F.interpolate``, ``align_corners=False``: what the ResNet was trained on)."""
    check_int("size", size, 8, 512, hint="pass the side in pixels, e.g. helpers.models.resnet_size(device)")
    x = digits_to_float(images)
    return torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)


#: The nine one-pixel shifts (rows, columns) of :func:`shifted_digits`, the unshifted one first.
SHIFTS = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def shifted_digits(split: str = "test", shifts: int = len(SHIFTS)) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)`` of a split with each raw digit also moved by one pixel (the first ``shifts`` of
    :data:`SHIFTS`, zeros coming in at the edge): 9 × 360 = 3 240 test items, enough to resolve a 0.1-point change
    of accuracy. The shifted copies are new inputs to the model, not new digits: they are correlated with the
    originals, so they sharpen the comparison of two variants more than they estimate accuracy on new writers."""
    check_int("shifts", shifts, 1, len(SHIFTS), hint=f"pass how many of the {len(SHIFTS)} shifts to use")
    images, labels = load_digits_raw(split)
    padded = torch.nn.functional.pad(images, (1, 1, 1, 1))
    out = [padded[:, 1 - dy : 9 - dy, 1 - dx : 9 - dx] for dy, dx in SHIFTS[:shifts]]
    return torch.cat(out), labels.repeat(shifts)


def digits_jpegs(size: int, split: str = "test", shifts: int = 1, quality: int = 90) -> tuple[list[Path], torch.Tensor]:
    """The digits of a split (with ``shifts`` of :func:`shifted_digits`) as grey JPEG files of ``size``×``size``
    pixels, the ResNet's own input (:func:`upscale_digits` × 255, rounded), encoded by Pillow at ``quality``:
    ``(paths, labels)``, one file per item, in the items' order. Built once into ``<outputs>/cache/`` (a folder
    per setting, renamed into place when complete, so an interrupted build is never read) and reused. Decoding
    one (``PIL.Image.open``) gives back the model's input up to JPEG's losses, so accuracy stays checkable."""
    import io
    import shutil
    import tempfile

    from PIL import Image

    from .paths import output_subdir

    check_int("quality", quality, 1, 100, hint="pass a JPEG quality from 1 to 100, e.g. 90")
    images, labels = shifted_digits(split, shifts)
    folder = output_subdir("cache") / f"digits_jpeg_{split}_{size}px_{shifts}shift_q{quality}"
    names = [f"{i:05d}_{int(y)}.jpg" for i, y in enumerate(labels)]
    if not all((folder / n).is_file() for n in names):
        pixels = upscale_digits(images, size).mul(255).round().to(torch.uint8)[:, 0].numpy()
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + "."))
        try:
            for name, image in zip(names, pixels, strict=True):
                buffer = io.BytesIO()
                Image.fromarray(image).save(buffer, "JPEG", quality=quality)  # 2-D uint8: a grey ("L") image
                (tmp / name).write_bytes(buffer.getvalue())
            shutil.rmtree(folder, ignore_errors=True)  # an incomplete earlier build
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return [folder / n for n in names], labels


def load_digits(split: str = "test") -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)``: images float32 ``N×1×8×8`` scaled to [0, 1], labels int64 in 0…9."""
    images, labels = load_digits_raw(split)
    return digits_to_float(images), labels


def digits_loader(split: str = "test", batch_size: int = 64, shuffle: bool = False, **kwargs: object) -> DataLoader:
    """A ``DataLoader`` over the digits (extra keyword arguments go to ``DataLoader``)."""
    check_int("batch_size", batch_size, hint="pass how many digits per batch, e.g. 64")
    return DataLoader(TensorDataset(*load_digits(split)), batch_size=batch_size, shuffle=shuffle, **kwargs)


def load_corpus(split: str = "all") -> torch.Tensor:
    """The docstring corpus as a 1-D uint8 tensor of bytes (token ids 0…255): ``"train"`` is the first 95 % of
    its documents, ``"test"`` the last 5 % (held out from training), ``"all"`` both."""
    check_choice("split", split, SPLITS, hint="'test' is the held-out 5 % of the documents")
    text = verify_shipped(CORPUS, DATA_DIR).read_bytes()
    cut = text.rfind(CORPUS_SEPARATOR.encode(), 0, int(len(text) * (1 - HELD_OUT))) + len(CORPUS_SEPARATOR)
    part = {"train": text[:cut], "test": text[cut:], "all": text}[split]
    return torch.frombuffer(bytearray(part), dtype=torch.uint8)


def photo_paths() -> list[Path]:
    """The shipped photographs, sorted by name."""
    paths = sorted(PHOTOS_DIR.glob("*.jpg"))
    if not paths:
        raise FileNotFoundError(f"no photos in {PHOTOS_DIR}; restore them with `git checkout data/`.")
    return paths


def read_photo(path: str | Path) -> torch.Tensor:
    """Decode one JPEG into a ``uint8`` tensor ``3×H×W``.

    Decoding uses Pillow and ``transforms.v2.functional.pil_to_tensor``: torchvision 0.29 deprecated its own
    ``torchvision.io`` image decoders in favour of TorchCodec, which needs system FFmpeg libraries that a
    plain ``pip install`` does not bring. Pillow is what most production CPU pipelines use anyway.
    """
    from PIL import Image
    from torchvision.transforms.v2.functional import pil_to_tensor

    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(f"path must be the path of a JPEG file, got {path!r}; e.g. photo_paths()[0]")
    path = Path(path)
    if path.resolve().is_relative_to(DATA_DIR.resolve()):
        verify_shipped(path, DATA_DIR)  # a shipped photo is checked; a learner's own is read as it is
    elif not path.is_file():
        raise FileNotFoundError(f"path={str(path)!r} is not an image file: pass the path of a JPEG or PNG.")
    try:
        with Image.open(path) as image:
            return pil_to_tensor(image.convert("RGB"))
    except (OSError, SyntaxError, ValueError) as exc:  # Pillow: UnidentifiedImageError, "image file is truncated"
        raise ValueError(f"{path.name} is not a readable image ({exc}): pass the path of a whole JPEG or PNG.") from exc


def photo_transform(size: int = 224, normalize: bool = True):  # -> torchvision.transforms.v2.Compose
    """Resize the short side to ``size``, centre-crop ``size×size``, scale to float, ImageNet-normalise. With
    ``normalize=False`` the image stays ``uint8`` after the crop (4× fewer bytes to copy; normalise it on the
    device with :func:`normalize_on_device`, which gives the same floats)."""
    from torchvision.transforms import v2

    check_int("size", size, hint="pass the side of the square image in pixels, e.g. 224")
    if not isinstance(normalize, bool):
        raise ValueError(f"normalize={normalize!r} is not allowed: normalize must be True or False.")
    steps = [v2.Resize(size, antialias=True), v2.CenterCrop(size)]
    if normalize:
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return v2.Compose(steps)


def normalize_on_device(batch: torch.Tensor) -> torch.Tensor:
    """A ``uint8`` batch (N×3×H×W, where it already is: e.g. on the GPU) to the floats :func:`photo_transform`
    gives: scaled to [0, 1], ImageNet-normalised."""
    if not isinstance(batch, torch.Tensor) or batch.dtype != torch.uint8 or batch.dim() != 4 or batch.shape[1] != 3:
        got = f"{batch.dtype} {tuple(batch.shape)}" if isinstance(batch, torch.Tensor) else type(batch).__name__
        raise ValueError(f"normalize_on_device needs a uint8 batch N×3×H×W (got {got}), e.g. from normalize=False.")
    if batch.numel() == 0:
        raise ValueError(f"normalize_on_device got an empty batch {tuple(batch.shape)}: pass at least one image.")
    mean, std = imagenet_stats(str(batch.device))
    return (batch.float() * (1.0 / 255) - mean) / std  # as torchvision's ToDtype(scale=True): times 1/255, bit for bit


@functools.lru_cache(maxsize=8)
def imagenet_stats(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageNet's mean and std as 1×3×1×1 tensors on ``device``, made once per device: building them for every
    batch (``torch.tensor(..., device="cuda")``) is a copy from pageable host memory, which synchronises with
    the GPU, per batch: the hidden sync ``torch.cuda.set_sync_debug_mode("warn")`` reports."""
    from .device import choose_device

    device = str(choose_device(device))
    mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
    return mean, std


class PhotoDataset(Dataset):
    """The shipped photos as a dataset: decode → resize → normalise on every access (real CPU work, as in a
    production input pipeline). ``repeat`` cycles through the photos to make a longer stream;
    ``normalize=False`` stops at the resized ``uint8`` image (see :func:`photo_transform`)."""

    def __init__(self, size: int = 224, repeat: int = 1, normalize: bool = True) -> None:
        check_int("repeat", repeat, hint="pass how many times the stream cycles through the photos, e.g. 1")
        self.paths = photo_paths()
        self.transform = photo_transform(size, normalize=normalize)
        self.repeat = repeat

    def __len__(self) -> int:
        return len(self.paths) * self.repeat

    def __getitem__(self, i: int) -> torch.Tensor:
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} photos")
        return self.transform(read_photo(self.paths[i % len(self.paths)]))
