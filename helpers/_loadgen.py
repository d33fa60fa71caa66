"""The open-loop load generator's process (started by :func:`helpers.serving.open_loop`; not imported).

It reads a spec (url, bodies, send offsets, time-out), sends each request at its offset from the start without
waiting for earlier answers (asyncio + aiohttp, no connection limit), and writes per request the actual send
time, completion time, HTTP status (0 time-out, -1 connection error) and the start of the body, with its own CPU
time and wall time. It imports neither torch nor helpers, so it starts in well under a second.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

#: How much of each response body a run keeps (enough for a short JSON answer or an error message).
BODY_CHARS = 300


async def _generate(url: str, bodies: list[str], offsets: list[float], timeout: float) -> dict[str, Any]:
    import aiohttp

    n = len(offsets)
    sent, done, status, texts = [math.nan] * n, [math.nan] * n, [0] * n, [""] * n
    loop = asyncio.get_running_loop()
    connector = aiohttp.TCPConnector(limit=0)  # no connection limit: a limit would be a closed loop in disguise
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:

        async def one(i: int, start: float) -> None:
            sent[i] = loop.time() - start
            try:
                async with session.post(
                    url, data=bodies[i % len(bodies)], headers={"content-type": "application/json"}
                ) as resp:
                    texts[i] = (await resp.text())[:BODY_CHARS]
                    status[i] = resp.status
            except TimeoutError:
                status[i] = 0
            except aiohttp.ClientError as e:
                status[i], texts[i] = -1, repr(e)[:BODY_CHARS]
            done[i] = loop.time() - start

        start = loop.time() + 0.05
        tasks = []
        for i, off in enumerate(offsets):
            delay = start + off - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, start)))
        await asyncio.gather(*tasks)
    for i in range(n):  # a time-out's completion is when it was given up: its send plus the time-out
        if status[i] == 0:
            done[i] = sent[i] + timeout
    return {"sent": sent, "done": done, "status": status, "bodies": texts}


def _main(spec_path: str, out_path: str) -> None:
    import psutil

    spec = json.loads(Path(spec_path).read_text())
    me = psutil.Process()
    cpu0, wall0 = sum(me.cpu_times()[:2]), time.perf_counter()
    result = asyncio.run(_generate(spec["url"], spec["bodies"], spec["offsets"], float(spec["timeout"])))
    result["cpu"] = sum(me.cpu_times()[:2]) - cpu0
    result["wall"] = time.perf_counter() - wall0
    tmp = Path(out_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out_path)


def _serve() -> None:
    """Run after run, for as long as the parent keeps it: one line ``SPEC.json RESULT.json`` on stdin per run, one
    line ``done`` on stdout when its result is written. It starts (imports aiohttp) once, not once per run; it ends
    when its stdin closes (the parent exited)."""
    for line in sys.stdin:
        spec_path, out_path = line.split()
        _main(spec_path, out_path)
        print("done", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    elif len(sys.argv) != 3:
        raise SystemExit(
            "usage: python helpers/_loadgen.py SPEC.json RESULT.json (helpers.serving.open_loop writes both), "
            "or --serve (specs read from stdin, one run per line)"
        )
    else:
        _main(sys.argv[1], sys.argv[2])
