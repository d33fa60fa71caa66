"""Serving a language model to a stream of requests, in one process and in real time (notebook 13).

- :func:`make_requests`: open-loop Poisson arrivals, each with a prompt (a window of the held-out corpus) and an
  output length drawn from a distribution; arrival times are fixed before the run, so a slow engine cannot slow
  the arrivals (no coordinated omission).
- :func:`serve`: an engine loop over a static KV cache of ``slots`` rows, with two schedulers:
  ``"static"`` (request-level batching: a batch is formed, prefilled, decoded until its longest request ends,
  and only then is the next admitted) and ``"continuous"`` (iteration-level scheduling, Orca's: at every decode
  step finished sequences leave and waiting ones take their slots). ``chunk`` splits prompts into pieces of at
  most that many tokens, one piece per iteration (chunked prefill, as in Sarathi-Serve), so a long prompt does
  not stall every running sequence for its whole prefill.
- ``serve(..., draft=, gamma=)``: speculative decoding inside the engine: at every iteration the draft proposes
  ``gamma`` tokens for every slot (batched draft steps) and the target checks all of them in one pass over
  ``slots × (gamma + 1)`` tokens; each sequence keeps its own agreeing prefix plus the target's next token, so
  its tokens are still exactly the target's greedy ones. It can pay only while a round costs fewer plain steps
  than the tokens it yields, which needs the check to stay memory-bound and the draft to be cheap (notebook 13, §6).
- :func:`serve_live`: the same continuous-batching engine for requests that arrive *while* it runs (from another
  thread, through a queue), with a call when each request's first token and its last are ready: what a load
  generator that owns the clock, such as MLPerf's LoadGen (``helpers.mlperf``), needs.
- :class:`Trace` (per request: arrival, admission, the time of every token) and :class:`EngineRun` (the traces,
  the per-iteration log and the metrics: TTFT, TPOT, inter-token latency, end-to-end, throughput, goodput).

Decoding is greedy, so the tokens of every request can be checked against :func:`helpers.llm.generate`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import queue
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .checks import check_callable, check_choice, check_instance, check_int, check_number
from .llm import GPT, decode_step
from .serving import poisson_arrivals

__all__ = ["Request", "Trace", "EngineRun", "make_requests", "pooled", "serve", "serve_live", "percentile"]


@dataclass(frozen=True)
class Request:
    """One request: when it arrives (seconds from the run's start), its prompt (token ids) and how many tokens
    to generate."""

    id: int
    arrival: float
    prompt: tuple[int, ...]
    max_new: int

    def __post_init__(self) -> None:
        check_number("arrival", self.arrival, minimum=0.0, hint="seconds from the run's start, finite and ≥ 0")
        check_int("max_new", self.max_new, hint="every request asks for at least one token")
        prompt = self.prompt
        if isinstance(prompt, (str, bytes)) or not isinstance(prompt, (tuple, list)) or not prompt:
            raise ValueError(f"request {self.id}: prompt must be a non-empty tuple of token ids, e.g. (72, 105).")
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise ValueError(f"request {self.id}: its prompt must hold token ids (integers ≥ 0).")


@dataclass
class Trace:
    """What happened to one request: when it was admitted to a slot and when each of its tokens was ready."""

    request: Request
    admitted: float = math.nan
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:  # a hand-built trace: its times must be a clock's readings, in order
        if not all(isinstance(t, numbers.Real) and math.isfinite(t) for t in self.times) or any(
            b < a for a, b in zip(self.times, self.times[1:], strict=False)
        ):
            raise ValueError("a Trace's times must be finite seconds in the order the tokens came (never decreasing).")
        if self.times and self.times[0] < self.request.arrival:
            raise ValueError("a Trace's first token cannot come before its request arrived (times[0] < arrival).")

    @property
    def ttft(self) -> float:
        """Time to first token: queueing + prefill (+ the first token's step); NaN before the first token."""
        return self.times[0] - self.request.arrival if self.times else math.nan

    @property
    def tpot(self) -> float:
        """Time per output token after the first: (end-to-end − TTFT) / (tokens − 1)."""
        return (self.times[-1] - self.times[0]) / (len(self.times) - 1) if len(self.times) > 1 else math.nan

    @property
    def e2e(self) -> float:
        return self.times[-1] - self.request.arrival if self.times else math.nan

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive tokens (a stall shows here, not in the mean)."""
        return list(np.diff(self.times))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of the finite values, NaN when there are none."""
    q = check_number("q", q, minimum=0.0, hint="a percentile between 0 and 100, e.g. 99")
    if q > 100:
        raise ValueError(f"q={q!r} is not allowed: q must be a percentile between 0 and 100, e.g. 99.")
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"values must be a list of seconds, got {type(values).__name__}.")
    if not all(isinstance(v, numbers.Real) for v in values):
        raise TypeError("values must be numbers (seconds); NaN marks one not measured.")
    finite = [v for v in values if math.isfinite(v)]
    return float(np.percentile(finite, q)) if finite else math.nan


@dataclass
class EngineRun:
    """One run of :func:`serve`: the traces (in request order), the iteration log (``start``, ``seconds``,
    ``decoding`` sequences, ``prefill_tokens``, ``live`` sequences and the ``lengths`` (positions) each holds in
    the cache; with a draft also ``proposed``, ``accepted`` and ``emitted`` tokens) and the settings (``gamma``
    0: no speculation)."""

    policy: str
    slots: int
    chunk: int | None
    traces: list[Trace]
    iterations: list[dict[str, float]]
    seconds: float
    gamma: int = 0

    def summary(self, ttft_target: float = 1.0, tpot_target: float = 0.05) -> dict[str, float]:
        """p50/p99 of TTFT, TPOT, inter-token latency and end-to-end (seconds), output tokens/s over the run,
        and goodput: requests per second that met both the TTFT and the TPOT target (DistServe's definition)."""
        check_number("ttft_target", ttft_target, positive=True, hint="pass the TTFT target in seconds, e.g. 1.0")
        check_number("tpot_target", tpot_target, positive=True, hint="pass the TPOT target in seconds, e.g. 0.05")
        ttft = [t.ttft for t in self.traces]
        tpot = [t.tpot for t in self.traces]
        itl = [gap for t in self.traces for gap in t.itl]
        e2e = [t.e2e for t in self.traces]
        met = sum(a <= ttft_target and (math.isnan(b) or b <= tpot_target) for a, b in zip(ttft, tpot, strict=True))
        row = {"policy": self.policy, "slots": self.slots, "chunk": self.chunk or 0, "requests": len(self.traces)}
        for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e)):
            row[f"{name}_p50"], row[f"{name}_p99"] = percentile(values, 50), percentile(values, 99)
        row["tokens_per_s"] = sum(len(t.tokens) for t in self.traces) / self.seconds
        row["goodput"] = met / self.seconds
        row["met"] = met / len(self.traces)
        row["mean_decoding"] = float(np.mean([it["decoding"] for it in self.iterations if it["decoding"]] or [0]))
        if self.gamma:  # speculation: the draft's acceptance rate and the tokens a sequence got per target pass
            rounds = [it for it in self.iterations if "proposed" in it]
            row["gamma"] = self.gamma
            row["acceptance"] = sum(it["accepted"] for it in rounds) / max(1, sum(it["proposed"] for it in rounds))
            row["tokens_per_pass"] = sum(it["emitted"] for it in rounds) / max(1, sum(it["decoding"] for it in rounds))
        return row


def pooled(runs: Sequence[EngineRun]) -> EngineRun:
    """Several runs of one policy (repeated runs, :func:`helpers.runs.compare_runs`) as one, for a descriptive table:
    their traces and iterations together, their seconds added (tokens/s and goodput over all of them). Verdicts
    judge the runs themselves, each the unit."""
    if not runs or not all(isinstance(r, EngineRun) for r in runs):
        raise ValueError("pooled() needs a non-empty list of EngineRun, e.g. compare_runs(...).results['continuous'].")
    first = runs[0]
    return EngineRun(
        policy=first.policy,
        slots=first.slots,
        chunk=first.chunk,
        traces=[t for r in runs for t in r.traces],
        iterations=[it for r in runs for it in r.iterations],
        seconds=sum(r.seconds for r in runs),
        gamma=first.gamma,
    )


def make_requests(
    corpus: torch.Tensor,
    rate: float,
    duration: float,
    prompt_len: tuple[int, int] = (16, 128),
    new_len: tuple[int, int] = (8, 64),
    seed: int = 0,
) -> list[Request]:
    """Poisson arrivals at ``rate`` requests/s over ``duration`` s; prompt and output lengths log-uniform in the
    given ranges (many short, a few long, as in real traffic); each prompt a window of ``corpus`` (token ids)."""
    check_instance("corpus", corpus, torch.Tensor, hint="pass token ids, e.g. helpers.data.load_corpus('test')")
    if corpus.dim() != 1 or corpus.dtype.is_floating_point or corpus.dtype.is_complex or corpus.dtype == torch.bool:
        raise ValueError(
            f"corpus must be a 1-D tensor of integer token ids, got {corpus.dtype} {tuple(corpus.shape)}: "
            "e.g. helpers.data.load_corpus('test')."
        )
    for name, pair in (("prompt_len", prompt_len), ("new_len", new_len)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{name}={pair!r}: pass (shortest, longest), e.g. (16, 128).")
    for name, (lo, hi) in (("prompt_len", prompt_len), ("new_len", new_len)):
        check_int(f"{name}[0]", lo, hint="lengths are positive token counts")
        check_int(f"{name}[1]", hi, minimum=lo, hint="give (shortest, longest)")
    if len(corpus) <= prompt_len[1]:
        raise ValueError(f"the corpus has {len(corpus)} tokens: fewer than the longest prompt ({prompt_len[1]}).")
    rng = np.random.default_rng([seed, 1])  # a stream of its own: lengths independent of the arrival times

    def draw(lo: int, hi: int) -> int:
        return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))

    requests = []
    for i, arrival in enumerate(poisson_arrivals(rate, duration, seed)):
        n = draw(*prompt_len)
        start = int(rng.integers(0, len(corpus) - n))
        prompt = tuple(int(x) for x in corpus[start : start + n].tolist())
        requests.append(Request(i, float(arrival), prompt, draw(*new_len)))
    return requests


class _Slot:
    def __init__(self, trace: Trace) -> None:
        self.trace, self.filled = trace, 0  # prompt tokens already in the cache

    @property
    def prompt(self) -> tuple[int, ...]:
        return self.trace.request.prompt

    @property
    def decoding(self) -> bool:
        return self.filled == len(self.prompt)

    @property
    def done(self) -> bool:
        return len(self.trace.tokens) >= self.trace.request.max_new


def serve(
    model: GPT,
    requests: Sequence[Request],
    policy: str = "continuous",
    slots: int = 8,
    chunk: int | None = None,
    step: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    max_wait: float = 0.05,
    max_len: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    draft: GPT | None = None,
    gamma: int = 4,
) -> EngineRun:
    """Serve ``requests`` as they arrive (real time) and return an :class:`EngineRun` (see the module docstring).

    ``step(model, tokens, pos)`` is the decode step over every slot (tokens and positions ``slots × 1``; default
    :func:`helpers.llm.decode_step`; a compiled one keeps one shape). ``max_wait``: how long the static scheduler
    waits for a full batch after its first request arrived. ``max_len``: positions per slot (default the model's
    ``max_seq_len``): one cache shape for every run, so a compiled step compiles once. One step runs before the
    clock starts (warm-up).

    ``draft``: a smaller :class:`helpers.llm.GPT` of the same vocabulary for speculative decoding (continuous
    batching only; ``step`` is then unused: the draft and the target run eagerly), ``gamma`` tokens proposed per
    sequence per iteration. A slot then needs ``gamma`` positions more than its longest request."""
    check_instance("model", model, GPT, hint="pass a helpers.llm.GPT, e.g. helpers.llm.trained_lm('target')")
    check_choice("policy", policy, ("continuous", "static"), hint="iteration-level or request-level batching")
    check_int("slots", slots, maximum=4096, hint="pass how many sequences the cache holds at once, e.g. 8")
    if chunk is not None:
        check_int("chunk", chunk, hint="pass the most prompt tokens prefilled per iteration, or None")
    check_number("max_wait", max_wait, minimum=0.0, hint="seconds the static scheduler waits to fill a batch")
    if not requests:
        raise ValueError("no requests to serve: make some with make_requests(corpus, rate, duration).")
    max_len = model.config.max_seq_len if max_len is None else max_len
    check_int("max_len", max_len, maximum=model.config.max_seq_len, hint="positions per slot, at most max_seq_len")
    for r in requests:
        check_instance("a request", r, Request, hint="make requests with make_requests(...) or Request(...)")
        check_int(f"request {r.id}'s max_new", r.max_new, hint="every request asks for at least one token")
        if not r.prompt or min(r.prompt) < 0 or max(r.prompt) >= model.config.vocab_size:
            raise ValueError(f"request {r.id}: its prompt must be token ids in 0…{model.config.vocab_size - 1}.")
    longest = max(len(r.prompt) + r.max_new for r in requests)
    if draft is not None:
        _check_draft(model, draft, gamma, policy, max_len)
        longest += gamma  # the last check of a sequence scores gamma positions past its last token
    if longest > max_len:
        raise ValueError(f"a request needs {longest} positions; a slot holds {max_len}: raise max_len or shorten it.")
    step = decode_step if step is None else step
    check_callable("step", step, hint="pass a decode step like helpers.llm.decode_step (or a compiled one)")
    with torch.inference_mode():
        engine = _Engine(model, requests, policy, slots, chunk, step, max_wait, clock, max_len, draft, gamma)
        return engine.run()


def _check_draft(model: GPT, draft: GPT, gamma: int, policy: str, max_len: int) -> None:
    check_instance("draft", draft, GPT, hint="pass a smaller helpers.llm.GPT that shares the target's tokens")
    check_int("gamma", gamma, maximum=64, hint="the draft proposes gamma tokens per iteration, e.g. 4")
    if draft is model:
        raise ValueError("draft is the target itself: pass a smaller model (or an int8 copy) as the draft.")
    if draft.config.vocab_size != model.config.vocab_size or draft.device != model.device:
        raise ValueError("the draft must share the target's vocabulary and device.")
    if policy != "continuous":
        raise ValueError("speculative decoding runs in the continuous engine: pass policy='continuous' with draft=.")
    if max_len > draft.config.max_seq_len:
        raise ValueError(f"max_len={max_len} is more positions than the draft holds ({draft.config.max_seq_len}).")


class _Engine:
    def __init__(  # noqa: ANN001
        self, model, requests, policy, slots, chunk, step, max_wait, clock, max_len, draft=None, gamma=0
    ) -> None:
        self.model, self.policy, self.n, self.chunk, self.step = model, policy, slots, chunk, step
        self.draft, self.gamma = draft, gamma if draft is not None else 0  # 0: no speculation
        self.max_wait, self.clock = max_wait, clock
        self.traces = [Trace(r) for r in requests]
        self.arriving = deque(sorted(self.traces, key=lambda t: t.request.arrival))
        self.queue: deque[Trace] = deque()
        self.slots: list[_Slot | None] = [None] * slots
        self.iterations: list[dict[str, float]] = []
        device = model.device
        model.setup_cache("static", slots, max_len)
        self.tokens = torch.zeros(slots, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(slots, 1, dtype=torch.long, device=device)
        if draft is None:
            step(model, self.tokens, self.pos)  # warm-up (a compiled step compiles here, not inside the timed run)
        else:
            draft.setup_cache("static", slots, max_len)
            self.before = torch.zeros_like(self.tokens)  # each sequence's token before its last: the draft's catch-up
            self.speculate(torch.zeros(slots, 1, dtype=torch.bool, device=device))  # warm-up: every shape once
            self.pos.zero_()

    def now(self) -> float:
        return self.clock() - self.start

    def run(self) -> EngineRun:
        self.start = self.clock()
        while self.arriving or self.queue or any(self.slots):
            while self.arriving and self.arriving[0].request.arrival <= self.now():
                self.queue.append(self.arriving.popleft())
            if not any(self.slots) and not self.queue:
                time.sleep(max(0.0, self.arriving[0].request.arrival - self.now()))  # idle until the next arrival
                continue
            if self.admit():
                self.iterate()
            else:
                time.sleep(0.0005)  # the static scheduler waits for its batch to fill
        return EngineRun(self.policy, self.n, self.chunk, self.traces, self.iterations, self.now(), self.gamma)

    def admit(self) -> bool:
        """Move queued requests into free slots; say whether there is work for an iteration."""
        if self.policy == "static" and any(self.slots):
            return True  # a static batch runs to its end before anyone joins
        if self.policy == "static" and self.queue:
            full = len(self.queue) >= self.n or not self.arriving
            if not full and self.now() - self.queue[0].request.arrival < self.max_wait:
                return False
        for s in range(self.n):
            if self.slots[s] is None and self.queue:
                trace = self.queue.popleft()
                trace.admitted = self.now()
                self.slots[s] = _Slot(trace)
        return any(self.slots)

    def iterate(self) -> None:
        began, budget, prefilled = self.now(), self.chunk or math.inf, 0
        for s, slot in enumerate(self.slots):  # prefill: whole prompts, or at most `chunk` tokens in all
            if slot is None or slot.decoding or budget <= 0:
                continue
            piece = slot.prompt[slot.filled : slot.filled + int(min(budget, len(slot.prompt)))]
            ids = torch.tensor([piece], device=self.tokens.device)
            at = torch.arange(slot.filled, slot.filled + len(piece), device=ids.device)
            logits = self.model(ids, at, slots=torch.tensor([s], device=ids.device))[:, -1]
            slot.filled += len(piece)
            budget, prefilled = budget - len(piece), prefilled + len(piece)
            self.pos[s, 0] = slot.filled  # the next write: a decode step's garbage lands where the prompt goes
            if self.draft is not None:  # the draft reads the prompt too, into the same row of its own cache
                self.draft(ids, at, slots=torch.tensor([s], device=ids.device))
                self.before[s, 0] = piece[-1]
            if slot.decoding:
                self.emit(s, int(logits.argmax(-1)))
        live = [s for s, slot in enumerate(self.slots) if slot is not None and slot.decoding and not slot.done]
        counts = {}
        if live and self.draft is not None:
            counts = self.speculative_round(live)
        elif live:  # one decode step over every row (one shape); rows not live compute too, and are ignored
            nxt = self.step(self.model, self.tokens, self.pos).argmax(-1)
            chosen, t = nxt.tolist(), self.now()
            self.tokens.copy_(nxt[:, None])
            for s in live:
                self.pos[s, 0] += 1
                self.emit(s, chosen[s], t)
        lengths = [slot.filled + len(slot.trace.tokens) for slot in self.slots if slot is not None]
        self.iterations.append(
            {
                "start": began,
                "seconds": self.now() - began,
                "decoding": len(live),
                "prefill_tokens": prefilled,
                "lengths": lengths,
                "live": sum(slot is not None for slot in self.slots),
                **counts,
            }
        )
        self.retire()

    def speculate(self, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One round over every row (one shape whatever is live): the draft catches up on the row's last two
        tokens and proposes ``gamma``; the target scores its last token and the proposals in one pass. Returns the
        proposals (slots × gamma), the target's choices (slots × (gamma + 1)) and how many proposals each row
        keeps (slots × 1). Rows not live write their garbage at and past their next position, where their prompt
        or their next token is written before any query can see it (the mask hides later positions)."""
        g, pos = self.gamma, self.pos
        start = pos - live.long()  # live rows re-read their previous token (at pos - 1) with their last (at pos)
        pair = torch.cat([torch.where(live, self.before, self.tokens), self.tokens], 1)
        logits = self.draft(pair, torch.cat([start, start + 1], 1))[:, -1:]
        proposal = [logits.argmax(-1)]
        for i in range(1, g):
            proposal.append(decode_step(self.draft, proposal[-1], pos + i).argmax(-1, keepdim=True))
        proposal = torch.cat(proposal, 1)
        check = torch.cat([self.tokens, proposal], 1)
        choice = self.model(check, pos + torch.arange(g + 1, device=pos.device)).argmax(-1)
        kept = (proposal == choice[:, :g]).long().cumprod(1).sum(1, keepdim=True)  # each row's agreeing prefix
        return proposal, choice, kept

    def speculative_round(self, live: list[int]) -> dict[str, int]:
        mask = torch.zeros(self.n, 1, dtype=torch.bool, device=self.tokens.device)
        mask[live] = True
        proposal, choice, kept = self.speculate(mask)
        checked = torch.cat([self.tokens, proposal], 1)
        self.before.copy_(torch.where(mask, checked.gather(1, kept), self.before))  # the token before the new last
        proposals, choices, ks, t = proposal.tolist(), choice.tolist(), kept[:, 0].tolist(), self.now()
        emitted = 0
        for s in live:
            k = ks[s]
            trace = self.slots[s].trace
            room = trace.request.max_new - len(trace.tokens)
            for token in (proposals[s][:k] + [choices[s][k]])[:room]:
                self.emit(s, token, t)  # a round's tokens are ready together, at its end
                emitted += 1
            self.pos[s, 0] += k + 1
        # accepted counts what the target agreed with, even past a request's last token: the draft's acceptance
        return {"proposed": self.gamma * len(live), "accepted": sum(ks[s] for s in live), "emitted": emitted}

    def emit(self, s: int, token: int, t: float | None = None) -> None:
        trace = self.slots[s].trace
        trace.tokens.append(token)
        trace.times.append(self.now() if t is None else t)
        self.tokens[s, 0] = token

    def retire(self) -> None:
        """Continuous: a finished sequence leaves its slot now. Static: the batch leaves when its last ends."""
        finished = [s for s, slot in enumerate(self.slots) if slot is not None and slot.done]
        if self.policy == "continuous":
            for s in finished:
                self.slots[s], self.pos[s, 0] = None, 0
        elif len(finished) == sum(slot is not None for slot in self.slots):
            self.slots = [None] * self.n
            self.pos.zero_()


def serve_live(
    model: GPT,
    inbox: queue.Queue,
    *,
    slots: int = 8,
    step: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    max_len: int | None = None,
    on_first: Callable[[object, int], None] | None = None,
    on_done: Callable[[object, list[int]], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> EngineRun:
    """Continuous batching of requests that arrive while it runs. Each item of ``inbox`` is ``(tag, Request)``:
    the request arrives when the engine takes it from the queue (its own ``arrival`` is ignored); ``None`` ends
    the run once every request taken is done. ``on_first(tag, token)`` is called when a request's first token is
    ready, ``on_done(tag, tokens)`` when its last is. Returns the :class:`EngineRun` (arrivals as taken)."""
    check_instance("model", model, GPT, hint="pass a helpers.llm.GPT, e.g. helpers.llm.trained_lm('target')")
    check_instance("inbox", inbox, queue.Queue, hint="pass a queue.Queue of (tag, Request) items, then None")
    check_int("slots", slots, maximum=4096, hint="pass how many sequences the cache holds at once, e.g. 8")
    max_len = model.config.max_seq_len if max_len is None else max_len
    check_int("max_len", max_len, maximum=model.config.max_seq_len, hint="positions per slot, at most max_seq_len")
    with torch.inference_mode():
        engine = _LiveEngine(model, slots, decode_step if step is None else step, clock, max_len, inbox)
        engine.on_first, engine.on_done = on_first, on_done
        return engine.run()


class _LiveEngine(_Engine):
    def __init__(self, model, slots, step, clock, max_len, inbox) -> None:  # noqa: ANN001
        super().__init__(model, [], "continuous", slots, None, step, 0.0, clock, max_len)
        self.inbox, self.closed, self.tags, self.max_len = inbox, False, {}, max_len
        self.on_first = self.on_done = None

    def take(self, block: bool) -> None:
        """Move what has arrived into the queue; wait (briefly) for an arrival only when there is nothing to do."""
        while True:
            try:
                item = self.inbox.get(timeout=0.05) if block else self.inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            if item is None:
                self.closed = True
                continue
            tag, request = item
            if len(request.prompt) + request.max_new > self.max_len or not request.prompt:
                raise ValueError(f"request {tag!r}: an empty prompt or more positions than a slot holds.")
            trace = Trace(dataclasses.replace(request, arrival=self.now()))
            self.traces.append(trace)
            self.tags[id(trace)] = tag
            self.queue.append(trace)

    def run(self) -> EngineRun:
        self.start = self.clock()
        while not (self.closed and not self.queue and not any(self.slots)):
            self.take(block=not self.queue and not any(self.slots))
            if self.admit():
                self.iterate()
        return EngineRun("continuous", self.n, None, self.traces, self.iterations, self.now())

    def emit(self, s: int, token: int, t: float | None = None) -> None:
        super().emit(s, token, t)
        trace = self.slots[s].trace
        if len(trace.tokens) == 1 and self.on_first is not None:
            self.on_first(self.tags[id(trace)], token)

    def retire(self) -> None:
        for slot in self.slots:
            if slot is not None and slot.done and self.on_done is not None:
                self.on_done(self.tags[id(slot.trace)], list(slot.trace.tokens))
        super().retire()
