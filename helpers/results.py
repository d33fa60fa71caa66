"""Record every measurement with its context, and load the reference results shipped with the course.

This machine's results go to ``<outputs>/results/<machine_id>.jsonl`` (one JSON object per line; the
outputs folder is git-ignored). Appends are safe with several notebooks running at once: each record is
one ``write`` of one whole line on a file opened with ``O_APPEND``, under an exclusive lock (``filelock``: a
``<file>.lock`` beside it, portable to Windows). If a
process dies in the middle of a write, the torn last line is skipped by the loader (with a warning) and the
next append starts on a fresh line, so the file stays readable.

Reference results measured on real machines live in ``data/reference/*.jsonl`` in the same format.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .device import DeviceLike, choose_device, machine_id
from .modes import course_mode
from .paths import REFERENCE_DIR, check_file_name, ensure_dir, outputs_dir
from .timing import Measurement, format_seconds


def results_path(device: DeviceLike = None) -> Path:
    """This machine's results file (created on the first record)."""
    return outputs_dir() / "results" / f"{machine_id(device)}.jsonl"


def _versions() -> dict[str, Any]:
    import torchvision

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda": torch.version.cuda,
    }


def _clean(value: Any) -> Any:
    """JSON-safe copy: tensors/numpy scalars to Python numbers, dtypes and devices to strings."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, torch.Tensor):
        return _clean(value.tolist())
    if isinstance(value, torch.dtype | torch.device):
        return str(value).replace("torch.", "")
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def make_record(
    measurement: Measurement | None = None,
    *,
    notebook: str,
    experiment: str,
    variant: str,
    batch: int | None = None,
    dtype: Any = None,
    device: DeviceLike = None,
    metrics: Mapping[str, float] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build (and validate) one record without writing it."""
    for name, value in (("notebook", notebook), ("experiment", experiment), ("variant", variant)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string naming what was measured, got {value!r}.")
    check_file_name("notebook", notebook)  # it names the results' notebook; reference files are found by it
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise ValueError(f"batch={batch!r} is not a batch size; pass an integer ≥ 1, or None.")
    if measurement is None and not metrics:
        raise ValueError("nothing to record: pass a Measurement, or metrics={'name': value}.")
    if measurement is not None and not isinstance(measurement, Measurement):
        raise TypeError(f"measurement must be a helpers.timing.Measurement, got {type(measurement).__name__}.")
    if metrics is not None and not isinstance(metrics, Mapping):
        raise ValueError(
            f"metrics must be a dict of name → number, e.g. {{'p99_s': 0.01}}, not {type(metrics).__name__}."
        )
    metrics = _clean(dict(metrics or {}))  # numpy / tensor scalars become plain numbers
    clash = sorted(set(metrics) & RESERVED_COLUMNS)
    if clash:
        raise ValueError(
            f"metric name(s) {', '.join(map(repr, clash))} would overwrite a column of the results table; "
            "name the metric after what it measures, e.g. 'images_per_s' or 'p99_s'."
        )
    for key, value in metrics.items():
        if value is None:
            continue  # a NaN or inf: stored as null
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"metric {key!r}={value!r} is not a number; metrics hold numbers only.")
    dev = choose_device(device if device is not None else (measurement.device if measurement else None))
    record: dict[str, Any] = {
        "time": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "notebook": notebook,
        "experiment": experiment,
        "variant": variant,
        "batch": batch,
        "dtype": dtype,
        "device": str(dev),
        "machine_id": machine_id(dev),
        "mode": course_mode(),
        "versions": _versions(),
        "metrics": metrics,
        "measurement": measurement.to_dict() if measurement is not None else None,
        "extra": dict(extra or {}),
    }
    record = _clean(record)
    try:  # refused here, in one line, not when a later write or read meets it
        json.dumps(record, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"this record cannot be stored as JSON ({exc}): pass numbers and strings in extra.") from None
    return record


#: Seconds a writer waits for another writer's lock on a results file (an append takes milliseconds).
LOCK_TIMEOUT = 30.0


def append_record(record: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Append one record as one line, atomically with respect to other writers of the same file. Waits at most
    :data:`LOCK_TIMEOUT` seconds for another writer, and refuses at once a folder that cannot hold the lock."""
    if not isinstance(record, Mapping):
        raise TypeError(
            f"record must be a dict (one results record, e.g. from make_record), not {type(record).__name__}."
        )
    if not record:
        raise ValueError("record is empty: pass one results record, e.g. from make_record(...).")
    if not isinstance(path, (str, os.PathLike)) or str(path) == "" or Path(path).is_dir():
        raise ValueError(f"path={path!r}: pass the path of a .jsonl results file (not a folder).")
    try:
        line = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"record cannot be stored ({exc}); put only numbers, strings, lists and dicts in it."
        ) from None
    from filelock import FileLock, Timeout

    path = Path(path)
    ensure_dir(path.parent)
    lock = str(path) + ".lock"
    # filelock retries a lock file it cannot open, until its time-out: find out first (without creating it: a
    # soft lock, where fcntl is missing, takes an existing file for a held lock), and say so in one line
    unusable = os.path.isdir(lock) or (os.path.exists(lock) and not os.access(lock, os.R_OK | os.W_OK))
    if unusable or not os.access(path.parent, os.W_OK | os.X_OK):
        raise PermissionError(
            f"cannot create or open the lock file {lock}: pass a results path in a folder you can write."
        )
    # filelock (portable: no fcntl, so `import helpers` works on Windows) serialises writers of this file
    try:
        with FileLock(lock, timeout=LOCK_TIMEOUT):
            _append_line(path, line)
    except Timeout:
        raise TimeoutError(
            f"another writer held {lock} for over {LOCK_TIMEOUT:.0f} s: a stuck process? End it, or remove the "
            "lock file if no writer is running."
        ) from None
    return path


def _append_line(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        # A writer that died mid-line leaves no trailing newline: start ours on a fresh line.
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    line = b"\n" + line
        view = memoryview(line)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def record(
    measurement: Measurement | None = None,
    *,
    notebook: str,
    experiment: str,
    variant: str,
    path: str | os.PathLike[str] | None = None,
    **context: Any,
) -> dict[str, Any]:
    """Record a measurement (and/or ``metrics``) with its context to this machine's results file.

    Context: ``batch``, ``dtype``, ``device``, ``metrics`` (numbers such as GB/s), ``extra`` (anything else).
    Machine id, versions, mode and time are added automatically. Returns the record written.
    """
    rec = make_record(measurement, notebook=notebook, experiment=experiment, variant=variant, **context)
    append_record(rec, path if path is not None else results_path(rec["device"]))
    return rec


class Recorder:
    """``record`` bound to one notebook (and its device):
    ``rec = Recorder("00_environment", device); rec(m, experiment=..., variant=...)``."""

    def __init__(self, notebook: str, device: DeviceLike = None, path: str | os.PathLike[str] | None = None) -> None:
        if not isinstance(notebook, str) or not notebook.strip():
            raise ValueError("Recorder needs the notebook's name, e.g. Recorder('00_environment').")
        self.notebook = notebook
        self.device = None if device is None else choose_device(device)
        self.path = path
        self.records: list[dict[str, Any]] = []

    def __call__(self, measurement: Measurement | None = None, **context: Any) -> None:
        """Record and keep the record in ``self.records`` (returns nothing, so a notebook cell stays quiet).
        The device is, in order: ``device=`` here, the measurement's device, the Recorder's device."""
        if "device" not in context and measurement is None and self.device is not None:
            context["device"] = self.device
        self.records.append(record(measurement, notebook=self.notebook, path=self.path, **context))


def parse_records(text: str) -> tuple[list[dict[str, Any]], int]:
    """The records of a results file's text, one JSON object per line, and how many lines were torn or corrupt
    (skipped: a writer killed mid-line leaves half a line, which must not be glued to the next one)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be the str of a results file, got {type(text).__name__}.")
    records, bad, _ = _parse(text)
    return records, bad


def _parse(text: str) -> tuple[list[dict[str, Any]], int, int]:
    """Records, torn or corrupt lines (not JSON), and lines of JSON that are not a record (not an object)."""
    records, torn, foreign = [], 0, 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            torn += 1
            continue
        if isinstance(obj, dict) and obj:  # an empty object is not a record
            records.append(obj)
        else:
            foreign += 1
    return records, torn + foreign, foreign


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete record in a results file (none if it does not exist yet); torn or corrupt lines are
    skipped with one warning."""
    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(f"path must be the path of a results file (.jsonl), got {path!r}.")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path={str(path)!r} is a folder; pass a results file inside it, e.g. {path}/cpu.jsonl")
    if not path.exists():
        return []
    records, bad, foreign = _parse(path.read_text(encoding="utf-8", errors="replace"))
    if bad - foreign:
        warnings.warn(
            f"{path.name}: skipped {bad - foreign} incomplete line(s) (an interrupted write); the rest is intact.",
            stacklevel=2,
        )
    if foreign:
        warnings.warn(
            f"{path.name}: skipped {foreign} line(s) of JSON that are not records (not an object: written by "
            "something else than helpers.results)",
            stacklevel=2,
        )
    return records


#: Columns of the results table that a metric of the same name would overwrite (the record's context and the
#: measurement's statistics): make_record refuses such a metric name; to_frame keeps an old one as metric_<name>.
RESERVED_COLUMNS = frozenset(
    {"time", "notebook", "experiment", "variant", "batch", "dtype", "device", "machine_id", "mode"}
    | {"median", "iqr", "p95", "first_call", "throughput", "n", "number", "noisy", "timer"}
)


def to_frame(records: list[dict[str, Any]]) -> Any:
    """Flatten records into a pandas DataFrame: context columns, ``metrics.*`` and the measurement's stats."""
    import pandas as pd

    if isinstance(records, (str, bytes, dict)) or not isinstance(records, (list, tuple)):
        raise TypeError(
            f"records must be a list of records (dicts, as read_records returns), got {type(records).__name__}."
        )
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise TypeError(f"records[{i}] is a {type(r).__name__}, not a record (a dict, as read_records returns).")

    rows, malformed = [], 0
    for rec in records:
        sections = [rec.get(k) for k in ("metrics", "measurement", "extra", "versions")]
        if any(s is not None and not isinstance(s, dict) for s in sections):
            malformed += 1  # one bad record must not break the whole table
            continue
        row = {k: v for k, v in rec.items() if k not in ("metrics", "measurement", "extra", "versions")}
        row.update({f"v_{k}": v for k, v in (rec.get("versions") or {}).items()})
        row.update({(f"metric_{k}" if k in RESERVED_COLUMNS else k): v for k, v in (rec.get("metrics") or {}).items()})
        m = rec.get("measurement") or {}
        for key in ("median", "iqr", "p95", "first_call", "throughput", "n", "number", "noisy", "timer"):
            if key in m:
                row[key] = m[key]
        row.update({f"extra_{k}": v for k, v in (rec.get("extra") or {}).items()})
        rows.append(row)
    if malformed:
        warnings.warn(
            f"skipped {malformed} malformed record(s): their metrics, measurement, extra or versions are not objects",
            stacklevel=2,
        )
    frame = pd.DataFrame(rows)
    if "batch" in frame:
        frame["batch"] = frame["batch"].astype("Int64")  # stays an integer column despite missing values
    return frame


def load_results(path: str | os.PathLike[str] | None = None) -> Any:
    """This machine's results as a DataFrame: every results file in the outputs folder (one per device
    it has run on: ``cpu-…`` and ``cuda-…`` on a GPU machine), or only the file ``path``."""
    if path is not None:
        return to_frame(read_records(path))
    records: list[dict[str, Any]] = []
    for file in sorted((outputs_dir() / "results").glob("*.jsonl")):
        records.extend(read_records(file))
    return to_frame(records)


def load_reference(
    notebook: str | None = None,
    experiment: str | None = None,
    machine: str | None = None,
    reference_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """Reference results shipped with the course (``data/reference/*.jsonl``), optionally filtered.

    ``machine`` matches a substring of ``machine_id`` (``"h200"``, ``"cuda"``, ``"cpu"``).
    """
    import pandas as pd

    for name, value in (("notebook", notebook), ("experiment", experiment), ("machine", machine)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{name}={value!r}: pass a non-empty string to filter by, or None for all.")
    folder = Path(reference_dir) if reference_dir is not None else REFERENCE_DIR
    if reference_dir is not None and not folder.is_dir():
        raise FileNotFoundError(f"reference_dir={str(folder)!r} is not a folder: pass the folder of *.jsonl results.")
    frames = []
    for file in sorted(folder.glob("*.jsonl")):
        frame = to_frame(read_records(file))
        if not frame.empty:
            frame["source"] = file.name
            frames.append(frame)
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    for column in ("notebook", "experiment", "machine_id"):  # records without them match no filter
        if column not in df:
            df[column] = None
    if notebook is not None:
        df = df[df["notebook"] == notebook]
    if experiment is not None:
        df = df[df["experiment"] == experiment]
    if machine is not None:
        df = df[df["machine_id"].astype("string").str.contains(machine, case=False, regex=False).fillna(False)]
    return df.reset_index(drop=True)


def reference_note(reference_id: str, device: DeviceLike = None) -> str | None:
    """One line when a reference comes from another host of this machine's CPU model with other features (a cloud
    sells both under one name): what it had that this one has not, and the reverse; None otherwise."""
    from .device import feature_tags, same_model_other_features

    here = machine_id(device)
    if not same_model_other_features(reference_id, here):
        return None
    theirs, ours = set(reference_id.split("-")), set(feature_tags())
    base = set(here.split("-")) - ours
    extra, missing = sorted(theirs - ours - base), sorted(ours - theirs)
    parts = [
        f"it had {', '.join(extra).upper()}" if extra else "",
        f"lacked {', '.join(missing).upper()}" if missing else "",
    ]
    return (
        f"{reference_id} is another host sold under this CPU's name, not this machine: "
        + " and ".join(p for p in parts if p)
        + f" ({here} here); its numbers show what those features do, not what this machine does."
    )


def reference_table(
    notebook: str, experiment: str, machine: str | None = "cuda", columns: list[str] | None = None
) -> Any:
    """The reference rows for one experiment, ready to show beside this machine's numbers.

    When no such reference ships yet, prints one line saying so (and how to produce one) and returns
    ``None``, so a notebook never fails, and never pretends, for lack of a reference.
    """
    if columns is not None and (
        isinstance(columns, str) or not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"columns={columns!r}: pass a list of column names, e.g. ['p99_s'], or None.")
    df = load_reference(notebook=notebook, experiment=experiment, machine=machine)
    if df.empty:
        where = f"a {machine} machine" if machine else "any machine"
        print(
            f"No reference result for {notebook}/{experiment} from {where} ships with the course yet; "
            "`make full-run` on such a machine produces one (see data/reference/README.md)."
        )
        return None
    keep = ["variant", "device", "batch", "dtype", "median", "iqr", "throughput"] + (columns or [])  # device: where
    # each row ran (a GPU machine's record of work its CPU did says "cpu")
    absent = [c for c in columns or [] if c not in df.columns or not df[c].notna().any()]
    keep = [c for c in keep if c in df.columns and df[c].notna().any()]
    first = df.iloc[0]
    for other in df["machine_id"].dropna().unique():
        note = reference_note(str(other))
        if note:
            print(note)
    if "device" in df.columns and df["device"].nunique() > 1:  # e.g. a GPU machine's CPU ran one of the set-ups
        devices = ", ".join(sorted(df["device"].dropna().unique()))
        print(
            f"These rows ran on different devices of that machine ({devices}; the device column says which): a row "
            "of one device against a row of another compares two set-ups, not two runtimes on one device."
        )
    if absent:  # an older reference may predate a metric: said, not an error
        print(f"Not in this reference (measured before it was recorded, or misspelt): {', '.join(absent)}.")
    print(
        f"Reference: {first.get('machine_id', '?')}, measured {str(first.get('time', ''))[:10]} with torch "
        f"{first.get('v_torch', '?')} ({len(df)} rows). It shows what that machine did with the notebook's code "
        "of that date; a row this notebook no longer produces, or one it added since, is not in it."
    )
    return readable_reference(df[keep])


#: how :func:`readable_reference` shows a reference's raw columns: (new name, converter)
_READABLE = {
    "median": ("median", lambda v: format_seconds(v)),
    "iqr": ("IQR", lambda v: format_seconds(v)),
    "throughput": ("items/s", lambda v: f"{v:,.0f}"),
    "bytes_per_s": ("GB/s", lambda v: f"{v / 1e9:.1f}"),
    "flops": ("GFLOP/s", lambda v: f"{v / 1e9:,.1f}"),
    "bytes": ("size", lambda v: f"{v / 1024:.0f} KiB" if v < 2**20 else f"{v / 2**20:.0f} MiB"),
    "size_bytes": ("size (KiB)", lambda v: f"{v / 1024:,.1f}"),
    "rel_err": ("max error / max |fp32|", lambda v: f"{v:.1e}"),
    "accuracy": ("accuracy", lambda v: f"{v:.2%}"),
}


def readable_reference(df: Any) -> Any:
    """A reference table as a learner reads live results: times as µs/ms, bandwidth in GB/s, FLOP/s in GFLOP/s,
    sizes in MiB/KiB (the raw columns renamed); other columns as they are."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a table of reference results (load_reference), got {type(df).__name__}.")
    out = df.copy()
    for column, (name, convert) in _READABLE.items():
        if column in out.columns:
            out[column] = out[column].map(lambda v, c=convert: c(v) if v is not None and v == v else "—")
            out = out.rename(columns={column: name})
    for column in [c for c in out.columns if c.endswith("_per_s") and pd.api.types.is_numeric_dtype(out[c])]:
        name = "GB/s" if column == "gb_per_s" else column.removesuffix("_per_s").replace("_", " ") + "/s"
        out = out.rename(columns={column: name})  # a rate: a number per second, not a time
        out[name] = out[name].map(lambda v: f"{v:,.1f}" if v == v else "—")
    for column in [c for c in out.columns if c.endswith("_s") and pd.api.types.is_numeric_dtype(out[c])]:
        out[column] = out[column].map(lambda v: format_seconds(v) if v == v else "—")  # a metric in seconds
        out = out.rename(columns={column: column[:-2].replace("_", " ")})
    return out.reset_index(drop=True)


def show_reference(
    notebook: str, experiment: str, machine: str | None = "cuda", columns: list[str] | None = None
) -> None:
    """Display :func:`reference_table` in a notebook (or print it elsewhere); says so when none ships."""
    table = reference_table(notebook, experiment, machine=machine, columns=columns)
    if table is None:
        return
    try:
        from IPython.display import display

        display(table)
    except ImportError:  # pragma: no cover - plain Python
        print(table.to_string())
