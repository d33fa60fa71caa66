"""Where the course's files live: the repository, the shipped data, and the ignored outputs folder."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT: Path = Path(__file__).resolve().parents[1]
DATA_DIR: Path = REPO_ROOT / "data"
REFERENCE_DIR: Path = DATA_DIR / "reference"


class OutputsNotWritable(OSError):
    """The outputs folder (``COURSE_OUTPUTS``) cannot be created or written."""


def outputs_dir() -> Path:
    """The folder for everything a run produces (results, traces, exported models, caches). Creates nothing.

    ``COURSE_OUTPUTS`` overrides it (the full-mode run script points it at its own folder); a relative value is
    taken from the repository root, so a notebook (run from notebooks/) and a script agree on where it is.
    Otherwise it is ``outputs/`` at the repository root, which git ignores.
    """
    raw = os.environ.get("COURSE_OUTPUTS", "").strip()
    path = Path(raw).expanduser() if raw else REPO_ROOT / "outputs"
    return (path if path.is_absolute() else REPO_ROOT / path).resolve()


def _check_path(name: str, path: object) -> None:
    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(f"{name} must be a path (a str or pathlib.Path), got {path!r}.")


def ensure_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its parents) for writing, or fail with one line naming ``COURSE_OUTPUTS``."""
    _check_path("path", path)
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputsNotWritable(
            f"cannot write to {path} ({exc.strerror or type(exc).__name__}): set COURSE_OUTPUTS to a folder you can "
            "write, e.g. COURSE_OUTPUTS=$HOME/course-outputs, and restart the kernel."
        ) from None
    if not os.access(path, os.W_OK):
        raise OutputsNotWritable(
            f"cannot write to {path} (no write permission): set COURSE_OUTPUTS to a folder "
            "you can write, e.g. COURSE_OUTPUTS=$HOME/course-outputs, and restart the kernel."
        )
    return path


def output_subdir(name: str) -> Path:
    """``<outputs>/<name>``, created for writing (one-line error when it cannot be); ``name`` is a folder inside
    the outputs folder (``"onnx"``, ``"shipping/replicas"``), never one outside it."""
    parts = Path(name).parts if isinstance(name, str) else ()
    if not parts or Path(name).is_absolute() or any(part.startswith(".") for part in parts):
        raise ValueError(f"name={name!r}: pass a folder inside the outputs folder, e.g. 'onnx' or 'shipping/replicas'.")
    return ensure_dir(outputs_dir() / name)


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never half of one: write a
    temporary file beside it, flush it to disk, then rename it over the target (``os.replace`` is atomic)."""
    import tempfile

    if not isinstance(text, str):
        raise TypeError(f"text must be a str to write, got {type(text).__name__}.")
    _check_path("path", path)
    if Path(path).is_dir():
        raise IsADirectoryError(f"{path} is a folder: pass the path of a file in it.")
    path = Path(path)
    ensure_dir(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputsNotWritable(
            f"cannot write a file in {path.parent} ({exc.strerror or type(exc).__name__}): pass a path in a folder "
            "you can write, e.g. under COURSE_OUTPUTS."
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix, so tools that check it accept it) for a library to write
    to; when the block ends without an error it is renamed over ``path`` in one step, otherwise removed. A
    reader never sees half a file: ``with atomic_path(p) as tmp: torch.save(state, tmp)``."""
    _check_path("path", path)
    path = Path(path)
    ensure_dir(path.parent)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_file_name(argument: str, name: object) -> str:
    """``name`` if it names a file inside a folder of the course (no folder part, no ``..``), else one line."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{argument}={name!r}: pass a non-empty file name, e.g. {argument}='resnet18'")
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith(".") or "\0" in name:
        raise ValueError(
            f"{argument}={name!r} is not a plain file name (no folders, no leading dot): the file goes in the "
            f"course's outputs folder; pass e.g. {argument}='resnet18'"
        )
    return name


class ShippedDataError(ValueError):
    """A shipped data file is missing, truncated or altered (it does not match ``data/checksums.sha256``)."""


_VERIFIED: dict[tuple[str, str], tuple[int, int]] = {}


def _checksums(data_dir: Path) -> dict[str, str]:
    listing = data_dir / "checksums.sha256"
    try:
        lines = listing.read_text(encoding="utf-8").splitlines()
    except OSError:
        raise ShippedDataError(f"{listing} is missing: restore the shipped data with `git checkout data/`.") from None
    table = {}
    for line in lines:
        digest, _, name = line.strip().partition("  ")
        if digest and name:
            table[name] = digest
    return table


def verify_shipped(path: str | os.PathLike[str], data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Check a shipped file against ``data/checksums.sha256`` before it is loaded, once per process (again
    only if its size or modification time changes). A missing, truncated or altered file raises
    :class:`ShippedDataError` with one line saying how to restore it; returns the path."""
    import hashlib

    path, root = Path(path), Path(data_dir) if data_dir is not None else DATA_DIR
    try:
        name = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise ShippedDataError(f"{path} is not a file of the shipped data folder {root}.") from None
    restore = "restore it with `git checkout data/` (or rebuild the data with `make data`)"
    if not path.is_file():
        raise ShippedDataError(f"data/{name} is missing: {restore}.")
    stat = path.stat()
    key, state = (str(root.resolve()), name), (stat.st_size, stat.st_mtime_ns)
    if _VERIFIED.get(key) == state:
        return path
    expected = _checksums(root).get(name)
    if expected is None:
        raise ShippedDataError(f"data/{name} is not listed in data/checksums.sha256: {restore}.")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise ShippedDataError(
            f"data/{name} does not match its checksum (truncated or altered, {stat.st_size} bytes): {restore}."
        )
    _VERIFIED[key] = state
    return path
