"""Notebook 13's machinery: per-sequence positions and grouped-query attention give the same tokens as
one-at-a-time generation; a paged KV cache attends exactly as a contiguous one and shares and frees its blocks;
speculative decoding returns the target's greedy tokens, alone and inside the engine; both schedulers serve every
request the tokens it would get alone, on their own timelines; and the training script trains a toy pair that
loads and verifies."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import llm, llm_serving
from helpers.data import load_corpus

REPO = Path(__file__).resolve().parents[1]
GQA = llm.GPTConfig(vocab_size=64, n_layer=2, n_head=4, n_kv_heads=2, dim=32, max_seq_len=96)
MHA = llm.GPTConfig(vocab_size=64, n_layer=2, n_head=4, dim=32, max_seq_len=96)


def prompts(lengths, vocab=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (1, n), generator=g) for n in lengths]


@pytest.mark.parametrize("config", [GQA, MHA], ids=["gqa", "mha"])
def test_rows_at_their_own_positions_decode_as_if_alone(config):
    model = llm.GPT(config).eval()
    ps = prompts((5, 11, 2))
    alone = [llm.generate(model, p, 9)[0][0] for p in ps]
    with torch.inference_mode():
        model.setup_cache("static", 3, 40)
        first = [
            model(p, torch.arange(p.shape[1]), slots=torch.tensor([s]))[:, -1].argmax(-1) for s, p in enumerate(ps)
        ]
        tok, pos = torch.stack(first), torch.tensor([[p.shape[1]] for p in ps])
        out = [tok]
        for _ in range(8):
            tok = llm.decode_step(model, tok, pos).argmax(-1, keepdim=True)
            pos += 1
            out.append(tok)
    for s, ref in enumerate(alone):
        assert torch.equal(torch.cat(out, 1)[s], ref), s


def test_grouped_query_attention_stores_fewer_heads():
    gqa, mha = llm.GPT(GQA).eval(), llm.GPT(MHA).eval()
    for model, config in ((gqa, GQA), (mha, MHA)):
        model.setup_cache("static", 2, 16)
        assert model.cache_bytes() == llm.kv_cache_bytes(config, 2, 16)
    assert llm.kv_cache_bytes(GQA, 1, 1) * 2 == llm.kv_cache_bytes(MHA, 1, 1)
    assert gqa.blocks[0].attn.qkv.weight.shape[0] == 32 + 2 * 2 * 8  # queries + keys and values of 2 heads
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        llm.GPTConfig(n_head=4, n_kv_heads=3, dim=32)


def test_a_dynamic_cache_refuses_per_row_positions():
    model = llm.GPT(MHA).eval()
    model.setup_cache("dynamic")
    with pytest.raises(ValueError, match="lockstep"), torch.inference_mode():
        model(torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long))


def test_paged_attention_equals_contiguous_and_blocks_come_and_go():
    model = llm.GPT(GQA).eval()
    ps = prompts((7, 13))
    with torch.inference_mode():
        model.setup_cache("static", 2, 40)
        ref = [model(p, torch.arange(p.shape[1]), slots=torch.tensor([s]))[0] for s, p in enumerate(ps)]
        table = model.setup_paged_cache(num_blocks=8, block_size=4)
        for s, p in enumerate(ps):
            table.reserve(s, p.shape[1])
            table.use([s])
            torch.testing.assert_close(model(p, torch.arange(p.shape[1])[None])[0], ref[s], rtol=1e-5, atol=1e-5)
        assert table.used == 2 + 4  # ceil(7/4) + ceil(13/4) blocks, allocated on demand
        # one decode step for both rows at their own positions, against the contiguous cache
        tok, pos = torch.tensor([[1], [2]]), torch.tensor([[7], [13]])
        for s in range(2):
            table.reserve(s, int(pos[s]) + 1)
        table.use([0, 1])
        paged = model(tok, pos)[:, -1]
        model.setup_cache("static", 2, 40)
        for s, p in enumerate(ps):
            model(p, torch.arange(p.shape[1]), slots=torch.tensor([s]))
        torch.testing.assert_close(paged, model(tok, pos)[:, -1], rtol=1e-5, atol=1e-5)
    assert table.used == 2 + 4  # position 7 fits block 1 of row 0 (4–7); 13 fits block 3 of row 1 (12–15)
    table.release(0)
    assert table.used == 4
    with pytest.raises(MemoryError, match="free finished sequences"):
        table.reserve(2, 4 * 5)
    fresh = model.setup_paged_cache(num_blocks=4, block_size=4)
    fresh.reserve("x", 4)
    fresh.use(["x"])
    with torch.inference_mode(), pytest.raises(ValueError, match="reserve"):
        model(torch.tensor([[1]]), torch.tensor([[4]]))  # position 4 is past the one block reserved (0–3)
    with pytest.raises(ValueError, match="reserve"):
        fresh.use(["never reserved"])


def test_a_shared_prefix_skips_its_prefill_and_gives_the_same_logits():
    model = llm.GPT(MHA).eval()
    system, user = prompts((9, 5), seed=3)
    full = torch.cat([system, user], 1)
    with torch.inference_mode():
        table = model.setup_paged_cache(num_blocks=16, block_size=4)
        table.reserve("system", 9)
        table.use(["system"])
        model(system, torch.arange(9)[None])
        skip = table.share("system", "a", 9)
        assert skip == 8
        assert table.refs[table.blocks["a"][0]] == 2  # two full blocks shared, not the partial one
        table.reserve("a", 14)
        table.use(["a"])
        shared = model(full[:, skip:], torch.arange(skip, 14)[None])[:, -1]
        model.setup_cache("static", 1, 20)
        torch.testing.assert_close(shared, llm.prefill(model, full), rtol=1e-5, atol=1e-5)
    table.release("system")
    assert table.used == 4  # the shared blocks stay while "a" uses them
    table.release("a")
    assert table.used == 0


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_speculative_decoding_returns_the_targets_greedy_tokens(gamma):
    target, draft = llm.GPT(GQA).eval(), llm.GPT(llm.GPTConfig(64, 1, 2, 16, 96), seed=1).eval()
    (p,) = prompts((6,))
    ref = llm.generate(target, p, 30)[0]
    tokens, stats = llm.speculative_generate(target, draft, p, 30, gamma=gamma)
    assert torch.equal(tokens, ref)
    assert 0 <= stats["accepted"] <= stats["proposed"] <= gamma * stats["target_passes"]
    # each pass yields its accepted tokens + 1; the first token comes from the prefill (trimmed to 30 at the end)
    assert stats["accepted"] + stats["target_passes"] >= 29
    same, stats = llm.speculative_generate(target, target, p, 30, gamma=gamma)
    assert torch.equal(same, ref)
    assert stats["accepted"] == stats["proposed"]  # a draft equal to the target
    assert stats["target_passes"] == math.ceil(29 / (gamma + 1))


def test_speculative_decoding_refuses_bad_input():
    target = llm.GPT(GQA).eval()
    (p,) = prompts((6,))
    with pytest.raises(ValueError, match="one prompt"):
        llm.speculative_generate(target, target, torch.cat([p, p]), 4)
    with pytest.raises(ValueError, match="max_seq_len"):
        llm.speculative_generate(target, target, p, 91, gamma=4)  # 6 + 91 > 96 positions
    tokens, _ = llm.speculative_generate(target, target, p, 90, gamma=4)  # exactly to the last position
    assert torch.equal(tokens, llm.generate(target, p, 90)[0])


def requests_for(lengths, news, arrivals, seed=0):
    return [
        llm_serving.Request(i, a, tuple(p[0].tolist()), n)
        for i, (p, n, a) in enumerate(zip(prompts(lengths, seed=seed), news, arrivals, strict=True))
    ]


@pytest.mark.parametrize(("policy", "chunk"), [("continuous", None), ("continuous", 4), ("static", None)])
def test_every_scheduler_serves_the_tokens_each_request_gets_alone(policy, chunk):
    model = llm.GPT(GQA).eval()
    reqs = requests_for((5, 17, 3, 9, 30), (6, 2, 9, 1, 4), (0.0,) * 5)  # all waiting: joins do not hang on timing
    run = llm_serving.serve(model, reqs, policy=policy, slots=2, chunk=chunk)
    for trace in run.traces:
        r = trace.request
        alone = llm.generate(model, torch.tensor([r.prompt]), r.max_new)[0][0].tolist()
        assert trace.tokens == alone, r.id
        assert r.arrival <= trace.admitted <= trace.times[0]
        assert trace.times == sorted(trace.times)
    assert max(it["live"] for it in run.iterations) <= 2
    if chunk:
        assert max(it["prefill_tokens"] for it in run.iterations) <= chunk
    # static: nobody joins a running batch (an earlier request had finished, or was admitted in the same batch);
    # continuous: requests join while others decode
    joined = any(
        a.admitted < b.admitted and a.times[0] <= b.admitted < a.times[-1] for a in run.traces for b in run.traces
    )
    assert joined == (policy == "continuous")
    row = run.summary(ttft_target=10.0, tpot_target=10.0)
    assert row["met"] == 1.0
    assert row["goodput"] == pytest.approx(5 / run.seconds)
    assert run.summary(ttft_target=1e-9, tpot_target=1e-9)["met"] == 0.0


@pytest.mark.parametrize(("draft_kind", "chunk"), [("copy", None), ("other", None), ("other", 4)])
def test_speculation_in_the_engine_serves_the_tokens_each_request_gets_alone(draft_kind, chunk):
    """A draft that always agrees (a copy: every round keeps all gamma proposals, the two-token catch-up) and one
    that rarely does (another random model): either way every request gets exactly its greedy tokens alone."""
    import copy

    model = llm.GPT(GQA).eval()
    draft = copy.deepcopy(model) if draft_kind == "copy" else llm.GPT(MHA, seed=1).eval()
    reqs = requests_for((5, 17, 3, 9, 30), (6, 2, 9, 1, 12), (0.0,) * 5)
    run = llm_serving.serve(model, reqs, slots=2, chunk=chunk, draft=draft, gamma=3)
    for trace in run.traces:
        r = trace.request
        assert trace.tokens == llm.generate(model, torch.tensor([r.prompt]), r.max_new)[0][0].tolist(), r.id
    row = run.summary()
    rounds = [it for it in run.iterations if "proposed" in it]
    assert rounds
    assert all(0 <= it["accepted"] <= it["proposed"] == 3 * it["decoding"] for it in rounds)
    assert row["gamma"] == 3
    assert 1.0 <= row["tokens_per_pass"] <= 4.0
    plain = llm_serving.serve(model, reqs, slots=2, chunk=chunk, gamma=3)  # no draft: gamma is not used
    assert plain.gamma == 0
    assert "acceptance" not in plain.summary()
    assert [t.tokens for t in plain.traces] == [t.tokens for t in run.traces]
    if draft_kind == "copy":  # the same weights: its proposals are the target's choices
        assert row["acceptance"] > 0.9
        assert row["tokens_per_pass"] > 3.0
    # every token a request got was counted once: emitted in rounds, or the first from its prefill
    assert sum(it["emitted"] for it in rounds) + len(reqs) == sum(len(t.tokens) for t in run.traces)


def test_speculation_in_the_engine_needs_room_and_a_real_draft():
    model, draft = llm.GPT(GQA).eval(), llm.GPT(MHA, seed=1).eval()
    reqs = requests_for((80,), (14,), (0.0,))  # 94 of 96 positions: no room for gamma = 3 more
    with pytest.raises(ValueError, match="positions"):
        llm_serving.serve(model, reqs, draft=draft, gamma=3)
    llm_serving.serve(model, reqs, draft=draft, gamma=2)  # the most the check allows (as for a plain run)
    with pytest.raises(ValueError, match="target itself"):
        llm_serving.serve(model, reqs, draft=model, gamma=2)
    with pytest.raises(ValueError, match="continuous"):
        llm_serving.serve(model, reqs, policy="static", draft=draft, gamma=2)
    with pytest.raises(ValueError, match="vocabulary"):
        llm_serving.serve(model, reqs, draft=llm.GPT(llm.GPTConfig(vocab_size=32, n_layer=1, n_head=2, dim=8)))


def test_a_slow_engine_does_not_delay_arrivals_it_queues_them():
    model = llm.GPT(MHA).eval()
    reqs = requests_for((4,) * 6, (8,) * 6, [0.0] * 6)

    def slow(m, tok, pos):
        import time

        time.sleep(0.005)
        return llm.decode_step(m, tok, pos)

    run = llm_serving.serve(model, reqs, policy="continuous", slots=2, step=slow)
    ttfts = sorted(t.ttft for t in run.traces)
    assert ttfts[-1] > ttfts[0] + 0.03  # the last two waited for slots: their queueing counts in TTFT
    assert all(t.request.arrival == 0.0 for t in run.traces)


def test_requests_are_reproducible_and_within_their_ranges():
    corpus = torch.arange(1000) % 256
    a = llm_serving.make_requests(corpus, rate=20, duration=2, prompt_len=(4, 40), new_len=(2, 9), seed=5)
    b = llm_serving.make_requests(corpus, rate=20, duration=2, prompt_len=(4, 40), new_len=(2, 9), seed=5)
    assert a == b
    assert len(a) > 10
    assert all(4 <= len(r.prompt) <= 40 and 2 <= r.max_new <= 9 for r in a)
    assert [r.arrival for r in a] == sorted(r.arrival for r in a)
    with pytest.raises(ValueError, match="longest prompt"):
        llm_serving.make_requests(corpus[:10], 1, 1, prompt_len=(4, 40))
    with pytest.raises(ValueError, match="no requests"):
        llm_serving.serve(llm.GPT(MHA), [])


def test_the_training_script_trains_a_toy_pair_that_loads_and_is_verified(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "train_lms.py"), "--toy", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "lm.json").read_text())
    assert set(report["models"]) == {"target", "draft"}
    target = llm.trained_lm("target", data_dir=tmp_path)
    assert target.config == llm.GPTConfig(**report["models"]["target"]["config"])
    assert report["models"]["target"]["test_bits_per_byte"] < report["uniform_bits_per_byte"]
    (tmp_path / "lm_draft.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(Exception, match="checksum"):
        llm.trained_lm("draft", data_dir=tmp_path)


def test_the_shipped_models_beat_uniform_and_their_draft_teaches_a_trade_off():
    report = llm.lm_metrics()
    for name in ("target", "draft"):
        assert report["models"][name]["test_bits_per_byte"] < 0.5 * report["uniform_bits_per_byte"]
    assert 0.2 <= report["speculative"]["acceptance"] <= 0.95
    target, draft = llm.trained_lm("target"), llm.trained_lm("draft")
    assert draft.config.vocab_size == target.config.vocab_size == 256
    text = load_corpus("test")[:64].long()[None]
    with torch.inference_mode():
        nll = torch.nn.functional.cross_entropy(target(text[:, :-1], torch.arange(63))[0], text[0, 1:])
    assert nll / math.log(2) < 8.0  # better than a uniform guess over 256 bytes on held-out text
    assert llm.decode(llm.encode("def f():")) == "def f():"


def test_the_engine_refuses_bad_requests_and_serves_to_the_last_position():
    model = llm.GPT(MHA).eval()
    (p,) = prompts((10,))
    with pytest.raises(ValueError, match="at least one token"):
        llm_serving.serve(model, [llm_serving.Request(0, 0.0, tuple(p[0].tolist()), 0)])
    with pytest.raises(ValueError, match="token ids"):
        llm_serving.serve(model, [llm_serving.Request(0, 0.0, (1, 64), 2)])
    with pytest.raises(ValueError, match="raise max_len"):
        llm_serving.serve(model, [llm_serving.Request(0, 0.0, tuple(p[0].tolist()), 9)], max_len=16)
    full = llm_serving.Request(0, 0.0, tuple(p[0].tolist()), 96 - 10)  # prompt + answer = max_seq_len
    run = llm_serving.serve(model, [full], slots=2)
    assert run.traces[0].tokens == llm.generate(model, p, 86)[0][0].tolist()


def test_the_held_out_split_is_whole_documents_never_trained_on():
    from helpers.data import CORPUS_SEPARATOR

    train, test, everything = load_corpus("train"), load_corpus("test"), load_corpus("all")
    assert len(train) + len(test) == len(everything)
    assert 0.03 < len(test) / len(everything) < 0.07
    assert bytes(train[-len(CORPUS_SEPARATOR) :].tolist()).decode() == CORPUS_SEPARATOR  # cut after a separator
    assert torch.equal(torch.cat([train, test]), everything)


def test_gqa_flops_count_the_smaller_key_value_projections():
    from torch.utils.flop_counter import FlopCounterMode

    model = llm.GPT(GQA).eval()
    tokens = torch.zeros(1, 1, dtype=torch.long)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(tokens, torch.tensor([0]))
    assert counter.get_total_flops() == pytest.approx(llm.flops_per_token(GQA, 1), rel=0.02)
    assert llm.flops_per_token(GQA, 1) < llm.flops_per_token(MHA, 1)


def test_a_bucketed_prefill_needs_a_static_cache_long_enough():
    model = llm.GPT(MHA).eval()
    (p,) = prompts((10,))
    with pytest.raises(ValueError, match="static cache of at least 16"):
        llm.prefill_bucketed(model, p, (16,))
    model.setup_cache("static", 1, 16)
    with pytest.raises(ValueError, match="positive whole prompt lengths"):
        llm.prefill_bucketed(model, p, (16.0,))
    with pytest.raises(ValueError, match="fits none"):
        llm.prefill_bucketed(model, p, (8,))


def test_pooled_runs_keep_every_trace_and_add_their_seconds():
    from helpers import llm_serving as ls

    runs = [
        ls.EngineRun("continuous", 2, None, [], [{"decoding": 1}], 0.5),
        ls.EngineRun("continuous", 2, None, [], [], 0.25),
    ]
    both = ls.pooled(runs)
    assert both.seconds == 0.75
    assert both.iterations == [{"decoding": 1}]
    assert both.policy == "continuous"
    with pytest.raises(ValueError):
        ls.pooled([])
