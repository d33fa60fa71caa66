"""Train the course's two small language models on data/stdlib_docstrings.txt (bytes as tokens): a target and
a smaller draft for speculative decoding (notebook 13). Writes data/lm_target.pt and data/lm_draft.pt (state
dicts in bfloat16, loadable with weights_only=True) and data/lm.json (their configurations and what was
measured: held-out bits per byte against the uniform 8, greedy acceptance of the draft at γ = 4, the time).
About 15 minutes on 2 CPU cores; deterministic for a given machine and torch version.

    .venv/bin/python scripts/train_lms.py            # the shipped models
    .venv/bin/python scripts/train_lms.py --toy DIR  # a toy pair in seconds, written to DIR (the tests)
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import llm  # noqa: E402
from helpers.data import load_corpus  # noqa: E402
from helpers.paths import DATA_DIR, atomic_path, write_atomic  # noqa: E402

SEQ = 256  # training window (bytes); the models' max_seq_len is 512
MODELS = {  # name: (config, steps, batch, peak learning rate)
    "target": (dict(vocab_size=256, n_layer=4, n_head=6, n_kv_heads=2, dim=192, max_seq_len=512), 640, 24, 3e-3),
    "draft": (dict(vocab_size=256, n_layer=2, n_head=2, n_kv_heads=1, dim=96, max_seq_len=512), 700, 24, 4e-3),
}
TOY = {
    "target": (dict(vocab_size=256, n_layer=2, n_head=2, n_kv_heads=1, dim=32, max_seq_len=128), 30, 8, 3e-3),
    "draft": (dict(vocab_size=256, n_layer=1, n_head=2, n_kv_heads=1, dim=16, max_seq_len=128), 20, 8, 3e-3),
}


def batches(data: torch.Tensor, batch: int, seq: int, generator: torch.Generator):
    while True:
        start = torch.randint(0, len(data) - seq - 1, (batch,), generator=generator)
        window = torch.stack([data[s : s + seq + 1] for s in start.tolist()]).long()
        yield window[:, :-1], window[:, 1:]


def train(config: dict, steps: int, batch: int, lr: float, data: torch.Tensor, seq: int) -> tuple[llm.GPT, float]:
    torch.manual_seed(0)
    model = llm.GPT(llm.GPTConfig(**config))
    with torch.no_grad():  # the random-weights model's head is scaled up for notebook 10; train from GPT-2's 0.02
        model.head.weight.normal_(0.0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(i, steps) / steps)))
    )
    gen, pos = torch.Generator().manual_seed(0), torch.arange(seq)
    model.train()
    start = time.perf_counter()
    for i, (x, y) in zip(range(steps), batches(data, batch, seq, gen), strict=False):
        loss = F.cross_entropy(model(x, pos).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if i % 100 == 0 or i == steps - 1:
            print(f"  step {i:5d}  loss {loss.item():.3f}  {time.perf_counter() - start:6.0f} s", flush=True)
    return model.eval(), time.perf_counter() - start


def acceptance(target: llm.GPT, draft: llm.GPT, data: torch.Tensor, prompts: int, new: int, gamma: int = 4) -> dict:
    """Greedy speculative decoding of held-out prompts: the draft's acceptance rate (accepted / proposed), the
    per-proposal acceptance probability α (accepted / (accepted + rejected)) and tokens per target pass."""
    gen, totals = torch.Generator().manual_seed(1), {"accepted": 0, "proposed": 0, "rejected": 0, "target_passes": 0}
    for start in torch.randint(0, len(data) - 64, (prompts,), generator=gen).tolist():
        prompt = data[start : start + 64].long()[None]
        tokens, stats = llm.speculative_generate(target, draft, prompt, new, gamma=gamma)
        ref, _ = llm.generate(target, prompt, new)
        assert torch.equal(tokens, ref), "speculative decoding changed the greedy output"
        totals = {key: totals[key] + stats[key] for key in totals}
    return {
        "gamma": gamma,
        "prompts": prompts,
        "new_tokens": new,
        "acceptance": round(totals["accepted"] / totals["proposed"], 4),
        "alpha": round(totals["accepted"] / (totals["accepted"] + totals["rejected"]), 4),
        "tokens_per_target_pass": round(prompts * (new - 1) / totals["target_passes"], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toy", type=Path, help="train a toy pair in seconds and write it to this folder")
    args = parser.parse_args()
    if args.toy:
        try:
            args.toy.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            sys.exit(f"--toy {args.toy}: cannot create that folder ({exc.strerror}): pass a folder you can write")
    specs, out, seq = (TOY, args.toy, 64) if args.toy else (MODELS, DATA_DIR, SEQ)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    train_data, test_data = load_corpus("train"), load_corpus("test")
    if args.toy:
        test_data = test_data[:4096]
    models = {}
    report = {"corpus": "stdlib_docstrings.txt", "tokens": "bytes (vocabulary 256)", "uniform_bits_per_byte": 8.0}
    report["models"] = {}
    for name, (config, steps, batch, lr) in specs.items():
        print(f"{name}: {config}", flush=True)
        model, seconds = train(config, steps, batch, lr, train_data, seq)
        model = model.to(torch.bfloat16).float()  # what ships is bf16: measure that model
        models[name] = model
        report["models"][name] = {
            "config": config,
            "parameters": sum(p.numel() for p in model.parameters()),
            "steps": steps,
            "batch": batch,
            "window": seq,
            "peak_lr": lr,
            "train_seconds": round(seconds, 1),
            "test_bits_per_byte": round(llm.bits_per_byte(model, test_data, seq), 4),
        }
        with atomic_path(out / f"lm_{name}.pt") as tmp:
            torch.save({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}, tmp)
    prompts, new = (4, 32) if args.toy else (24, 96)
    report["speculative"] = acceptance(models["target"], models["draft"], test_data, prompts, new)
    report.update(
        optimizer="AdamW (0.9, 0.95), wd 0.1, warm-up then cosine to 10 %, clip 1.0",
        torch=torch.__version__,
        trained_on=dt.date.today().isoformat(),
    )
    write_atomic(out / "lm.json", json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    if args.toy:  # the toy pair gets its own checksum list, so helpers.llm.trained_lm(data_dir=...) verifies it
        names = ["lm.json", *(f"lm_{name}.pt" for name in specs)]
        lines = [f"{hashlib.sha256((out / n).read_bytes()).hexdigest()}  {n}" for n in names]
        write_atomic(out / "checksums.sha256", "\n".join(lines) + "\n")
    else:
        from make_data import write_checksums  # scripts/ is on sys.path when this file runs as a script

        write_checksums()


if __name__ == "__main__":
    main()
