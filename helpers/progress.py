"""Progress on long work: one bar for every helper loop that can run past a few seconds (the rounds of a session,
a sweep, load runs, compiles of several variants, training), so a learner sees what is running and the time left.

``tqdm.auto`` draws a widget in JupyterLab and a text bar in a terminal. A bar appears only once its work has
lasted :data:`DELAY` seconds (a short loop shows nothing) and is removed when the work ends, so a finished cell
keeps only its results. The course's executor (``scripts/execute.py``: CI, ``make full-run``) sets
``COURSE_PROGRESS=off``: an executed copy holds no bar, and the checked outputs carry no noise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Seconds of work before a bar is drawn.
DELAY = 3.0


def enabled() -> bool:
    """False where ``COURSE_PROGRESS`` is ``off`` (or ``0``, ``false``, ``no``): executed copies stay quiet."""
    return os.environ.get("COURSE_PROGRESS", "on").strip().lower() not in ("0", "off", "false", "no")


def bar(total: int | None, desc: str, unit: str = "step") -> Any:
    """A ``tqdm.auto`` progress bar of ``total`` ``unit``s saying ``desc`` (a context manager: ``with bar(…) as
    b: … b.update(1)``), drawn after :data:`DELAY` seconds and removed when closed."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled(), leave=False, delay=DELAY, mininterval=0.5)


@contextmanager
def timed(desc: str, seconds: float) -> Iterator[None]:
    """A bar for one long call that reports no progress of its own (a LoadGen test, a compile): it fills with the
    seconds the call is expected to take, from a thread, and is removed when the call returns."""
    if not enabled():
        yield
        return
    import threading
    import time

    stop = threading.Event()
    shown = bar(total=max(1, round(seconds)), desc=desc, unit="s")

    def tick() -> None:
        start, done = time.monotonic(), 0
        while not stop.wait(1.0):
            now = min(int(time.monotonic() - start), shown.total)
            if now > done:
                shown.update(now - done)
                done = now

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        shown.close()
