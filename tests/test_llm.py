"""helpers.llm: the small decoder decodes the same tokens and logits with and without a KV cache, the cache
holds the bytes the formula says, and bad input gets a one-line message."""

import pytest
import torch

from helpers import llm

CFG = llm.GPTConfig(vocab_size=64, n_layer=2, n_head=2, dim=32, max_seq_len=48)


@pytest.fixture(scope="module")
def model():
    return llm.GPT(CFG).eval()


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, CFG.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))


def test_same_weights_from_the_same_seed():
    a, b, c = llm.GPT(CFG, seed=0), llm.GPT(CFG, seed=0), llm.GPT(CFG, seed=1)
    assert torch.equal(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, c.head.weight)


def test_cached_decoding_matches_recomputing_everything(model, prompt):
    tokens, logits = llm.generate_uncached(model, prompt, 12)
    assert tokens.shape == (2, 12)
    assert logits.shape == (2, 12, CFG.vocab_size)
    assert torch.equal(tokens, logits.argmax(-1))  # greedy: each token is the argmax of its logits
    for kind in ("dynamic", "static"):
        t, lg = llm.generate(model, prompt, 12, cache=kind)
        assert torch.equal(t, tokens), kind
        torch.testing.assert_close(lg, logits, rtol=1e-4, atol=1e-4)
    # a static cache longer than needed: unwritten slots are masked out
    t, lg = llm.generate(model, prompt, 12, cache="static", max_len=CFG.max_seq_len)
    assert torch.equal(t, tokens)
    torch.testing.assert_close(lg, logits, rtol=1e-4, atol=1e-4)


def test_a_cache_is_really_used_and_kept_only_when_static(model, prompt):
    llm.generate(model, prompt, 3, cache="static")
    cache = model.blocks[0].attn.cache
    assert isinstance(cache, llm.StaticKVCache)
    assert cache.k.shape[2] == prompt.shape[1] + 3
    assert cache.k[:, :, : prompt.shape[1] + 2].abs().sum() > 0  # written: the prompt and the fed tokens
    address = cache.k.data_ptr()
    llm.generate(model, prompt, 3, cache="static")  # same shape: the same buffers (a CUDA graph needs them)
    assert model.blocks[0].attn.cache.k.data_ptr() == address
    llm.generate(model, prompt, 3, cache="dynamic")
    assert model.blocks[0].attn.cache is None  # a dynamic cache is not left behind for the next forward
    model.clear_cache()
    assert model.cache_bytes() == 0


def test_a_kept_static_cache_serves_the_next_request_correctly(model, prompt):
    """A kept cache still holds the previous request's keys: every position must be written before it is read."""
    other = (prompt * 7 + 3) % CFG.vocab_size
    tokens, logits = llm.generate_uncached(model, other, 6)
    llm.generate(model, prompt, 6)
    address = model.blocks[0].attn.cache.k.data_ptr()
    t, lg = llm.generate(model, other, 6)
    assert model.blocks[0].attn.cache.k.data_ptr() == address
    assert torch.equal(t, tokens)
    torch.testing.assert_close(lg, logits, rtol=1e-4, atol=1e-4)
    model.clear_cache()


def test_a_failed_request_leaves_no_dynamic_cache(model, prompt):
    def failing(m, token, pos):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        llm.generate(model, prompt, 3, cache="dynamic", step=failing)
    assert model.blocks[0].attn.cache is None


def test_a_dynamic_cache_grows_by_one_position_per_step(model, prompt):
    lengths = []

    def step(m, token, pos):
        lengths.append(m.blocks[0].attn.cache.k.shape[2])
        return llm.decode_step(m, token, pos)

    llm.generate(model, prompt, 4, cache="dynamic", step=step)
    assert lengths == [5, 6, 7]


def test_one_token_and_a_one_token_prompt(model):
    one = torch.tensor([[3], [7]])
    tokens, logits = llm.generate_uncached(model, one, 1)
    for kind in ("dynamic", "static"):
        t, lg = llm.generate(model, one, 1, cache=kind)
        assert torch.equal(t, tokens)
        torch.testing.assert_close(lg, logits)
    t_long, _ = llm.generate(model, one, 5)
    assert torch.equal(t_long[:, :1], tokens)


def test_forcing_feeds_the_given_tokens(model, prompt):
    tokens, logits = llm.generate(model, prompt, 6)
    forced_tokens, forced_logits = llm.generate(model, prompt, 6, force=tokens)
    assert torch.equal(forced_tokens, tokens)  # forcing a model's own choices changes nothing
    torch.testing.assert_close(forced_logits, logits)
    other = (tokens + 1) % CFG.vocab_size
    _, other_logits = llm.generate(model, prompt, 6, force=other)
    torch.testing.assert_close(other_logits[:, 0], logits[:, 0])  # the first step comes from the prompt alone
    assert not torch.allclose(other_logits[:, 1:], logits[:, 1:])


def test_a_replacement_step_is_called(model, prompt):
    calls = []

    def step(m, token, pos):
        calls.append((int(pos), tuple(token.shape), token.stride()))
        return llm.decode_step(m, token, pos)

    llm.generate(model, prompt, 4, step=step)
    forced = torch.zeros(2, 4, dtype=torch.long)
    llm.generate(model, prompt, 4, step=step, force=forced)
    # positions advance; forced or not, the step sees one contiguous (batch, 1) token column
    assert calls == [(p, (2, 1), (1, 1)) for p in (5, 6, 7)] * 2


def test_static_cache_bytes_match_the_formula(model):
    model.setup_cache("static", batch=3, max_len=20)
    assert model.cache_bytes() == llm.kv_cache_bytes(CFG, batch=3, length=20, bytes_per_element=4)
    model.clear_cache()


def test_weight_bytes_and_flops():
    m = llm.GPT(CFG)
    linear = CFG.n_layer * 12 * CFG.dim**2 + CFG.dim * CFG.vocab_size
    assert llm.linear_weight_bytes(m) == 4 * linear
    norms = (2 * CFG.n_layer + 1) * 2 * CFG.dim
    assert llm.decode_weight_bytes(m) == 4 * (linear + norms)
    assert llm.decode_weight_bytes(m.to(torch.bfloat16)) == 2 * (linear + norms)


def test_flops_per_token_match_pytorchs_flop_counter(model):
    """One decoding step with a context of 20: the formula against FlopCounterMode (attention on the MATH
    backend, which FlopCounterMode counts like any matmul)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model.setup_cache("static", batch=1, max_len=20)
    with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        llm.decode_step(model, torch.tensor([[1]]), torch.tensor([19]))
    model.clear_cache()
    assert counter.get_total_flops() == llm.flops_per_token(CFG, context=20)


def test_int8_weight_bytes_count_data_and_scales():
    torchao = pytest.importorskip("torchao.quantization")
    m = llm.GPT(CFG).to(torch.bfloat16)
    torchao.quantize_(m, torchao.Int8WeightOnlyConfig(set_inductor_config=False))
    linear = CFG.n_layer * 12 * CFG.dim**2 + CFG.dim * CFG.vocab_size
    rows = CFG.n_layer * (3 * CFG.dim + CFG.dim + 4 * CFG.dim + CFG.dim) + CFG.vocab_size
    assert linear < llm.linear_weight_bytes(m) <= linear + 8 * rows  # a byte per weight, a scale (and zero) per row


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dim": 30, "n_head": 4}, "not a multiple"),
        ({"n_layer": 0}, "positive integer"),
        ({"vocab_size": 2.5}, "positive integer"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        llm.GPTConfig(**kwargs)


def test_bad_generation_input(model, prompt):
    with pytest.raises(ValueError, match="at least one token"):
        llm.generate(model, prompt, 0)
    with pytest.raises(ValueError, match="exceeds the model's max_seq_len"):
        llm.generate_uncached(model, prompt, CFG.max_seq_len)
    with pytest.raises(ValueError, match="token ids"):
        llm.generate(model, prompt.float(), 3)
    with pytest.raises(TypeError, match="decode_step"):
        llm.generate(model, prompt, 3, step="compiled")
    with pytest.raises(ValueError, match="force must be"):
        llm.generate(model, prompt, 3, force=prompt)
    with pytest.raises(ValueError, match="must hold the prompt"):
        llm.generate(model, prompt, 10, max_len=prompt.shape[1] + 5)
    with pytest.raises(ValueError, match="must hold the prompt"):
        llm.generate(model, prompt, 3, max_len=0)
    with pytest.raises(ValueError, match="outside 0…63"):
        llm.generate(model, prompt + CFG.vocab_size, 3)
    with pytest.raises(ValueError, match="outside"):
        llm.generate(model, prompt, 3, force=torch.full((2, 3), -1))
    with pytest.raises(ValueError, match="force must be a"):
        llm.generate(model, prompt, 3, force=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="prompt.to"):
        llm.generate(model, prompt.to("meta"), 3)
    with pytest.raises(ValueError, match="'static'"):
        model.setup_cache("paged")
    with pytest.raises(ValueError, match="batch size"):
        model.setup_cache("static", batch=0)
    with pytest.raises(ValueError, match="max_len"):
        model.setup_cache("static", max_len=CFG.max_seq_len + 1)


def test_compiled_step_matches_eager_and_compiles_once(model, prompt):
    """The static cache keeps one shape: the compiled step compiles once, forced or not, and agrees with eager.
    Dynamo's capture (one graph, no recompile) is what the helpers own; aot_eager runs that graph without
    generating C++ (16 s cold here). Inductor's own kernels are checked against eager in notebook 10."""
    torch._dynamo.reset()
    step = torch.compile(llm.decode_step, fullgraph=True, dynamic=False, backend="aot_eager")
    tokens, logits = llm.generate(model, prompt, 6)
    t, lg = llm.generate(model, prompt, 6, step=step)
    assert torch.equal(t, tokens)
    torch.testing.assert_close(lg, logits, rtol=1e-4, atol=1e-4)
    with torch._dynamo.config.patch(error_on_recompile=True):
        llm.generate(model, prompt, 6, step=step)
        _, forced_logits = llm.generate(model, prompt, 6, step=step, force=tokens)
    torch.testing.assert_close(forced_logits, logits, rtol=1e-4, atol=1e-4)
    model.clear_cache()


@pytest.mark.gpu(reason="CUDA graphs need a CUDA GPU")
def test_cuda_graph_step_matches_eager():
    from torch._dynamo.utils import counters

    gpu = llm.GPT(CFG).cuda().eval()
    prompt = torch.randint(0, CFG.vocab_size, (2, 5), device="cuda")
    tokens, logits = llm.generate(gpu, prompt, 8)
    torch._dynamo.reset()
    counters.clear()
    step = torch.compile(llm.decode_step, mode="reduce-overhead", fullgraph=True, dynamic=False)
    for _ in range(3):  # recorded, then replayed
        t, lg = llm.generate(gpu, prompt, 8, step=step)
        assert torch.equal(t, tokens)
        torch.testing.assert_close(lg, logits, rtol=1e-3, atol=1e-3)
    assert not counters["inductor"]["cudagraph_skips"], "CUDA graphs were skipped"
    # recorded once, with only the token and the position copied in at each replay (weights and cache are static)
    assert counters["inductor"]["cudagraph_recorded_non_static_inputs"] == 2


def _prefilled_on_gpu(batch, new):
    """A GPU model whose static cache holds a 5-token prompt, and the tokens and logits of generating ``new``."""
    gpu = llm.GPT(CFG).cuda().eval()
    prompt = torch.randint(0, CFG.vocab_size, (batch, 5), device="cuda")
    tokens, logits = llm.generate(gpu, prompt, new)  # leaves its static cache of 5 + new positions on the model
    with torch.inference_mode():
        gpu.setup_cache("static", batch, 5 + new)
        llm.prefill(gpu, prompt)
    return gpu, tokens, logits


@pytest.mark.gpu(reason="CUDA graphs need a CUDA GPU")
def test_a_recorded_eager_step_replays_the_same_logits_at_each_position():
    gpu, tokens, logits = _prefilled_on_gpu(2, 6)
    with torch.inference_mode():
        tok, pos = tokens[:, :1].clone(), torch.tensor([5], device="cuda")
        replay = llm.cuda_graph(llm.decode_step, gpu, tok, pos)  # recording runs the step: rewrite position 5 after
        for i in range(1, 6):
            tok.copy_(tokens[:, i - 1 : i])
            pos.fill_(4 + i)
            torch.testing.assert_close(replay(), logits[:, i], rtol=1e-3, atol=1e-3)


@pytest.mark.gpu(reason="CUDA graphs need a CUDA GPU")
def test_a_recorded_step_keeps_its_inputs_alive_after_the_caller_drops_them():
    gpu, tokens, logits = _prefilled_on_gpu(1, 2)
    with torch.inference_mode():
        replay = llm.cuda_graph(llm.decode_step, gpu, tokens[:, :1].clone(), torch.tensor([5], device="cuda"))
        torch.cuda.empty_cache()
        clutter = [torch.full((1, 1), 10**6, dtype=torch.long, device="cuda") for _ in range(64)]  # reuse freed blocks
        torch.testing.assert_close(replay(), logits[:, 1], rtol=1e-3, atol=1e-3)
        assert len(replay.inputs) == 3
        assert clutter


def test_cuda_graph_refuses_cpu_tensors():
    with pytest.raises(ValueError, match="CUDA device"):
        llm.cuda_graph(llm.decode_step, llm.GPT(CFG), torch.zeros(1, 1, dtype=torch.long), torch.tensor([0]))


def test_a_step_that_chooses_the_token_itself_decodes_the_same(model, prompt):
    tokens, logits = llm.generate(model, prompt, 7)
    t, lg = llm.generate(model, prompt, 7, step=llm.greedy_step)
    assert torch.equal(t, tokens)
    torch.testing.assert_close(lg, logits)
    compiled = torch.compile(llm.greedy_step, fullgraph=True, dynamic=False, backend="aot_eager")  # one graph
    t, _ = llm.generate(model, prompt, 7, step=compiled)
    assert torch.equal(t, tokens)
    forced = torch.randint(0, CFG.vocab_size, (2, 7), generator=torch.Generator().manual_seed(3))
    t_forced, _ = llm.generate(model, prompt, 7, step=llm.greedy_step, force=forced)
    t_ref, _ = llm.generate(model, prompt, 7, force=forced)
    assert torch.equal(t_forced, t_ref)


def test_a_bucketed_prefill_gives_the_unpadded_logits_and_compiles_once_per_bucket(model):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    run = torch.compile(model, fullgraph=True, dynamic=False, backend="aot_eager")  # Inductor's: notebook 10
    for n in (3, 7, 12):  # buckets 8, 8, 16
        ids = torch.randint(0, CFG.vocab_size, (1, n), generator=torch.Generator().manual_seed(n))
        with torch.inference_mode():
            model.setup_cache("static", 1, 16)
            expected = llm.prefill(model, ids)
            got = llm.prefill_bucketed(model, ids, (8, 16), run=run)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
            # and decoding after the padded prefill chooses what decoding after the exact one does
            token = got.argmax(-1, keepdim=True)
            after = llm.decode_step(model, token, torch.tensor([n]))
            model.setup_cache("static", 1, 16)
            llm.prefill(model, ids)
            torch.testing.assert_close(after, llm.decode_step(model, token, torch.tensor([n])), rtol=1e-4, atol=1e-4)
    assert counters["stats"]["unique_graphs"] == 2
    model.clear_cache()
    with pytest.raises(ValueError, match="fits none of the buckets"):
        llm.prefill_bucketed(model, torch.zeros(1, 20, dtype=torch.long), (8, 16))


def test_an_empty_prompt_a_position_past_the_cache_and_an_inference_cache_outside_inference_mode_say_so():
    model = llm.GPT(CFG).eval()
    with pytest.raises(ValueError, match="at least one token"):
        llm.generate(model, torch.zeros(1, 0, dtype=torch.long), 3)
    llm.generate(model, torch.ones(1, 3, dtype=torch.long), 2)  # keeps a cache made under inference_mode
    with pytest.raises(RuntimeError, match="clear_cache"):
        model(torch.ones(1, 2, dtype=torch.long), torch.arange(2))
    model.clear_cache()
    with torch.inference_mode():
        model.setup_cache("static", 1, 8)
        with pytest.raises(ValueError, match="past this static cache's 8 positions"):
            llm.decode_step(model, torch.ones(1, 1, dtype=torch.long), torch.tensor([9]))


def test_bits_per_byte_of_a_uniform_guess_is_eight_and_the_shipped_draft_scores_what_training_measured():
    from helpers.data import load_corpus

    uniform = llm.GPT(llm.GPTConfig(vocab_size=256, n_layer=1, n_head=2, dim=16, max_seq_len=32)).eval()
    torch.nn.init.zeros_(uniform.head.weight)  # every logit 0: each of the 256 bytes equally likely
    data = torch.randint(0, 256, (200,), generator=torch.Generator().manual_seed(0))
    assert llm.bits_per_byte(uniform, data, seq=32) == pytest.approx(8.0, abs=1e-6)
    draft = llm.trained_lm("draft")
    measured = llm.lm_metrics()["models"]["draft"]["test_bits_per_byte"]
    assert llm.bits_per_byte(draft, load_corpus("test"), seq=256) == pytest.approx(measured, abs=1e-3)
    assert llm.bits_per_byte(draft, load_corpus("test"), seq=64, max_windows=2) < 8.0  # a trained model beats a guess
    draft.setup_cache("static", batch=1, max_len=8)
    with pytest.raises(ValueError, match="clear_cache"):
        llm.bits_per_byte(draft, data, seq=32)
    with pytest.raises(ValueError, match="fewer than one window"):
        llm.bits_per_byte(uniform, data[:10], seq=32)


def test_batch_consistency_compares_a_request_alone_with_the_same_request_in_batches(model):
    prompt = torch.randint(0, CFG.vocab_size, (1, 6), generator=torch.Generator().manual_seed(3))
    result = llm.batch_consistency(model, prompt, batch_sizes=(1, 4))
    assert result[1]["bitwise"]
    assert result[1]["max_abs_diff"] == 0.0
    assert result[1]["same_choices"] == 1.0
    assert result[4]["max_abs_diff"] < 1e-4
    assert result[4]["same_choices"] == 1.0  # fp32: equal or within rounding

    def row_by_row(tokens):  # batch-invariant by construction: every row runs alone
        return torch.cat([model(tokens[i : i + 1], torch.arange(6)) for i in range(len(tokens))])

    assert all(r["bitwise"] for r in llm.batch_consistency(model, prompt, (1, 4, 9), forward=row_by_row).values())

    def leaky(tokens):  # a batch-dependent computation: each row's logits shifted by the batch's mean
        logits = model(tokens, torch.arange(6))
        return logits + 1e-3 * logits.mean(0, keepdim=True)

    shifted = llm.batch_consistency(model, prompt, (1, 4), forward=leaky)
    assert shifted[1]["bitwise"]
    assert not shifted[4]["bitwise"]
    assert shifted[4]["max_abs_diff"] > 0
    with pytest.raises(ValueError, match="shape \\(1, T\\)"):
        llm.batch_consistency(model, torch.ones(2, 3, dtype=torch.long))


def test_the_int8_kv_cache_rounds_each_value_within_half_its_scale():
    x = (
        torch.randn(2, 3, 5, 16, generator=torch.Generator().manual_seed(0))
        * torch.tensor([1e-3, 1.0, 50.0])[:, None, None]
    )
    q, scale = llm.Int8KVCache.quantize(x)
    assert q.dtype == torch.int8
    assert scale.shape == (2, 3, 5, 1)
    assert ((q.float() * scale - x).abs() <= scale / 2 + 1e-7).all()  # one rounding, at most half a step
    zeros, zero_scale = llm.Int8KVCache.quantize(torch.zeros(1, 1, 1, 4))
    assert (zeros == 0).all()
    assert torch.isfinite(zero_scale).all()  # an all-zero vector: no division by zero


def test_attention_over_the_int8_cache_stays_close_to_the_full_precision_cache():
    from helpers.data import load_corpus

    target = llm.trained_lm("draft")
    prompt = load_corpus("test")[:48].long()[None]
    tokens, logits = llm.generate(target, prompt, 24, cache="static")
    q_tokens, q_logits = llm.generate(target, prompt, 24, cache="int8", force=tokens)
    assert isinstance(target.blocks[0].attn.cache, llm.Int8KVCache)
    relative = ((q_logits - logits).norm() / logits.norm()).item()
    assert relative < 0.02, relative  # int8 keys and values: the logits move by a small fraction
    assert (q_tokens == tokens).float().mean() >= 0.9  # and greedy choices mostly stay
    cfg = target.config
    expected = 2 * cfg.n_layer * 1 * 72 * cfg.kv_heads * (cfg.head_dim + 4)  # int8 values + an fp32 scale per vector
    assert target.cache_bytes() == expected
    target.clear_cache()
