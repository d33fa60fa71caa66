"""A small GPT-style decoder and the ways to generate text with it (notebook 10).

The model is deliberately plain (learned positions, pre-norm blocks, ``scaled_dot_product_attention``) so that
every cost in decoding can be read off it:

- ``GPT(config)``: token + position embeddings, ``n_layer`` blocks, a final norm and an output projection.
- ``model(tokens, pos)`` runs ``tokens`` (batch × T) at absolute positions ``pos`` (T,) and returns logits for
  every position. Without a cache the T tokens attend causally to each other (the recompute-everything way).
- ``model.setup_cache("dynamic" | "static", batch, max_len)`` gives every attention layer a KV cache:
  ``DynamicKVCache`` grows by concatenation (new shapes every step: what a first implementation writes);
  ``StaticKVCache`` is preallocated to ``max_len`` and written in place at ``pos`` (fixed shapes: what
  ``torch.compile`` and CUDA graphs need; gpt-fast's design). ``model.clear_cache()`` removes them.
- ``generate_uncached`` / ``generate``: greedy decoding that returns the tokens and the logits of every step,
  so that two ways of decoding can be compared exactly.
- ``kv_cache_bytes``, ``decode_weight_bytes``, ``flops_per_token``: the bytes and FLOPs that set decoding's
  roofline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_callable, check_choice, check_instance, check_int

__all__ = [
    "GPTConfig",
    "GPT",
    "StaticKVCache",
    "DynamicKVCache",
    "generate",
    "generate_uncached",
    "decode_step",
    "prefill",
    "kv_cache_bytes",
    "decode_weight_bytes",
    "flops_per_token",
    "linear_weight_bytes",
]


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the decoder. ``dim`` must be a multiple of ``n_head``."""

    vocab_size: int = 1024
    n_layer: int = 4
    n_head: int = 4
    dim: int = 256
    max_seq_len: int = 512

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "dim", "max_seq_len"):
            value = getattr(self, name)
            check_int(f"GPTConfig.{name}", value, hint="give every size of the decoder as a positive integer")
        if self.dim % self.n_head:
            raise ValueError(
                f"GPTConfig: dim={self.dim} is not a multiple of n_head={self.n_head}; "
                "pick a dim that n_head divides (each head gets dim // n_head channels)."
            )

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head


def _check_cache_args(batch: int, max_len: int, limit: int) -> None:
    check_int("batch", batch, hint="a KV cache holds one row per sequence: pass the batch size of the prompts")
    check_int("max_len", max_len, maximum=limit, hint=f"a cache holds at most the model's max_seq_len ({limit})")


class StaticKVCache(nn.Module):
    """Keys and values for ``max_len`` positions, allocated once and written in place: the shapes never change,
    so a compiled decode step is compiled once and can be captured in a CUDA graph."""

    def __init__(
        self,
        batch: int,
        n_head: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        shape = (batch, n_head, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        return self.k, self.v

    def key_positions(self, device: torch.device) -> torch.Tensor:
        return torch.arange(self.k.shape[2], device=device)

    @property
    def empty(self) -> bool:
        return False  # it always holds max_len slots; the mask hides the ones not written yet


class DynamicKVCache(nn.Module):
    """Keys and values appended with ``torch.cat`` at every step: simple, but every step allocates new,
    larger tensors and changes shapes (a compiled step would recompile)."""

    def __init__(self) -> None:
        super().__init__()
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def key_positions(self, device: torch.device) -> torch.Tensor:
        return torch.arange(0 if self.k is None else self.k.shape[2], device=device)

    @property
    def empty(self) -> bool:
        return self.k is None


class Attention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.qkv = nn.Linear(config.dim, 3 * config.dim, bias=False)
        self.proj = nn.Linear(config.dim, config.dim, bias=False)
        self.cache: StaticKVCache | DynamicKVCache | None = None

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, self.head_dim).transpose(1, 2) for z in (q, k, v))
        if self.cache is None or self.cache.empty:
            # all keys are the T new tokens (no cache, or the first fill of a dynamic one): plain causal attention
            if self.cache is not None:
                k, v = self.cache.update(pos, k, v)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        else:
            k, v = self.cache.update(pos, k, v)
            # query at position p sees every key at a position ≤ p (unwritten static slots are masked out)
            mask = pos[:, None] >= self.cache.key_positions(x.device)[None, :]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.dim, 4 * config.dim, bias=False)
        self.down = nn.Linear(4 * config.dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(config.dim), Attention(config)
        self.norm2, self.mlp = nn.LayerNorm(config.dim), MLP(config)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), pos)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """A GPT-style decoder with random weights (see the module docstring)."""

    def __init__(self, config: GPTConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab_size, config.dim)
        self.pos = nn.Embedding(config.max_seq_len, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # GPT-2's initialisation, from a fixed seed: the same model on every machine
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    residual = name.endswith(("proj.weight", "down.weight"))  # scaled down as in GPT-2
                    std = 0.02 / math.sqrt(2 * config.n_layer) if residual else 0.02
                    p.copy_(torch.randn(p.shape, generator=generator) * std)
            # logits with a spread of a few units, as a trained model's: greedy choices are rarely near-ties
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) * 4 / math.sqrt(config.dim))

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.weight.dtype

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(pos)
        for block in self.blocks:
            x = block(x, pos)
        return self.head(self.norm(x))

    def setup_cache(self, kind: str, batch: int = 1, max_len: int | None = None) -> None:
        """Give every attention layer a KV cache: ``"static"`` (preallocated to ``max_len``, default the
        model's ``max_seq_len``, in the model's dtype and device) or ``"dynamic"`` (grown by concatenation).

        A static cache of the same shape, dtype and device is kept, not reallocated (as gpt-fast does): its
        buffers keep their addresses, which a CUDA graph recorded on them needs. It needs no zeroing: every
        position is written before a query can see it, and the mask hides the others."""
        cfg = self.config
        max_len = cfg.max_seq_len if max_len is None else max_len
        check_choice("kind", kind, ("static", "dynamic"), hint="a KV cache is preallocated (static) or concatenated")
        _check_cache_args(batch, max_len, cfg.max_seq_len)
        current = self.blocks[0].attn.cache
        if (
            kind == "static"
            and isinstance(current, StaticKVCache)
            and current.k.dtype == self.dtype
            and current.k.device == self.device
            and current.k.shape == (batch, cfg.n_head, max_len, cfg.head_dim)
        ):
            return
        for block in self.blocks:
            block.attn.cache = (
                StaticKVCache(batch, cfg.n_head, max_len, cfg.head_dim, self.dtype, self.device)
                if kind == "static"
                else DynamicKVCache()
            )

    def clear_cache(self) -> None:
        for block in self.blocks:
            block.attn.cache = None

    def cache_bytes(self) -> int:
        """Bytes the attention layers' caches hold now (0 without a cache)."""
        total = 0
        for block in self.blocks:
            cache = block.attn.cache
            if cache is not None and cache.k is not None:
                total += cache.k.nbytes + cache.v.nbytes
        return total


def _check_ids(name: str, ids: torch.Tensor, vocab_size: int) -> None:
    """Token ids must be integers in [0, vocab_size): an id out of range fails inside the embedding, and on a
    GPU as a device-side assert that breaks CUDA for the rest of the process. (One synchronisation per call.)"""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        raise ValueError(f"{name} must be a (batch, length) tensor of token ids (dtype torch.long).")
    if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < vocab_size):
        raise ValueError(
            f"{name} has token ids outside 0…{vocab_size - 1}, the model's vocabulary: "
            f"use ids below vocab_size={vocab_size}."
        )


def _check_tokens(model: GPT, prompt: torch.Tensor, new_tokens: int) -> None:
    check_instance("model", model, GPT, hint="pass a helpers.llm.GPT, e.g. GPT(GPTConfig())")
    if isinstance(prompt, torch.Tensor) and prompt.device != model.device:
        raise ValueError(
            f"the prompt is on {prompt.device} and the model on {model.device}: "
            "move the prompt with prompt.to(model.device)."
        )
    _check_ids("prompt", prompt, model.config.vocab_size)
    check_int("new_tokens", new_tokens, hint="generate at least one token")
    if prompt.shape[1] + new_tokens > model.config.max_seq_len:
        raise ValueError(
            f"a prompt of {prompt.shape[1]} tokens plus {new_tokens} new ones exceeds the model's "
            f"max_seq_len ({model.config.max_seq_len}): shorten one of them."
        )


@torch.inference_mode()
def generate_uncached(model: GPT, prompt: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding without a cache: every step runs the whole sequence so far again.
    Returns ``(tokens, logits)``: the ``new_tokens`` chosen (batch × new_tokens) and the logits each was
    chosen from (batch × new_tokens × vocab). Any cache on the model is removed first (a kept static cache
    is allocated again by the next :func:`generate`)."""
    _check_tokens(model, prompt, new_tokens)
    model.clear_cache()
    seq, logits = prompt, []
    for _ in range(new_tokens):
        out = model(seq, torch.arange(seq.shape[1], device=seq.device))[:, -1]
        logits.append(out.float())
        seq = torch.cat([seq, out.argmax(-1, keepdim=True)], dim=1)
    return seq[:, prompt.shape[1] :], torch.stack(logits, dim=1)


def prefill(model: GPT, prompt: torch.Tensor) -> torch.Tensor:
    """Run the prompt through a model that has a cache; return the logits of its last position."""
    return model(prompt, torch.arange(prompt.shape[1], device=prompt.device))[:, -1]


def decode_step(model: GPT, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """One decoding step: ``token`` (batch × 1) at position ``pos`` (a one-element tensor) → next logits.
    This is the function to compile: with a static cache its shapes never change."""
    return model(token, pos)[:, -1]


@torch.inference_mode()
def generate(
    model: GPT,
    prompt: torch.Tensor,
    new_tokens: int,
    cache: str = "static",
    step: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    max_len: int | None = None,
    force: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding with a KV cache (``"static"`` or ``"dynamic"``): the prompt is prefilled once, then one
    token per step. ``step`` replaces :func:`decode_step` (e.g. a compiled one). Returns ``(tokens, logits)``
    like :func:`generate_uncached`. A static cache stays on the model for the next request of the same shape
    (``model.clear_cache()`` frees it); a dynamic one is removed.

    ``force`` (batch × new_tokens): feed these tokens instead of the model's own choices (teacher forcing),
    so that a lower-precision model is scored on the same sequence as the reference: the tokens returned are
    still the model's own greedy choices at every position."""
    _check_tokens(model, prompt, new_tokens)
    total = prompt.shape[1] + new_tokens
    if max_len is not None:
        check_int(
            "max_len",
            max_len,
            minimum=total,
            maximum=model.config.max_seq_len,
            hint=f"a cache must hold the prompt and the new tokens ({total}) and fit the model's max_seq_len",
        )
    step = decode_step if step is None else step
    check_callable("step", step, hint="pass a function like decode_step (or a compiled one)")
    if force is not None:
        if not isinstance(force, torch.Tensor) or force.shape != (prompt.shape[0], new_tokens):
            raise ValueError(
                f"force must be a (batch, new_tokens) = {(prompt.shape[0], new_tokens)} tensor of "
                "token ids, e.g. the tokens of a reference run."
            )
        _check_ids("force", force, model.config.vocab_size)
    model.setup_cache(cache, prompt.shape[0], max_len or total)
    try:
        return _decode(model, prompt, new_tokens, step, force)
    finally:
        if cache == "dynamic":
            model.clear_cache()  # a dynamic cache left behind would be attended to by the next forward


def _decode(
    model: GPT,
    prompt: torch.Tensor,
    new_tokens: int,
    step: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor],
    force: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Everything a step reads is on the device before the loop: creating a GPU tensor from a Python number
    # inside it would be a blocking copy per token. The position is advanced in place (gpt-fast's way), and a
    # forced token is a contiguous (batch, 1) column like the model's own choice (else the compiled step would
    # see other strides and compile again).
    pos = torch.tensor([prompt.shape[1]], device=prompt.device)
    forced = None if force is None else force.to(prompt.device).t().contiguous()
    out = prefill(model, prompt)
    tokens, logits = [], []
    for i in range(new_tokens):
        logits.append(out.float())
        token = out.argmax(-1, keepdim=True)
        tokens.append(token)
        if i + 1 < new_tokens:
            fed = token if forced is None else forced[i].unsqueeze(1).clone()
            out = step(model, fed, pos).clone()  # clone: a CUDA-graph step reuses its output buffer
            pos += 1
    return torch.cat(tokens, dim=1), torch.stack(logits, dim=1)


def linear_weight_bytes(model: nn.Module) -> int:
    """Bytes of the matrices every decoding step reads in full: the Linear weights (quantized ones included:
    their int8 data plus scales), not the embedding tables (a step reads one row of each)."""
    check_instance("model", model, nn.Module, hint="pass the model, e.g. a helpers.llm.GPT")
    total = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            w = module.weight
            if hasattr(w, "__tensor_flatten__"):  # a tensor subclass (torchao): the tensors it is made of
                names, _ = w.__tensor_flatten__()
                total += sum(getattr(w, name).nbytes for name in names)
            else:
                total += w.numel() * w.element_size()
    return total


def decode_weight_bytes(model: nn.Module) -> int:
    """Weight bytes read per decoding step (any batch): all Linear weights and the LayerNorm parameters."""
    norms = sum(p.nbytes for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters())
    return linear_weight_bytes(model) + norms


def kv_cache_bytes(config: GPTConfig, batch: int, length: int, bytes_per_element: int = 4) -> int:
    """Bytes of a KV cache: keys and values (2) × layers × batch × length × dim."""
    check_instance("config", config, GPTConfig, hint="pass the model's GPTConfig, e.g. model.config")
    check_int("batch", batch, maximum=2**20)
    check_int("length", length, maximum=2**30)
    check_int("bytes_per_element", bytes_per_element, maximum=16)
    return 2 * config.n_layer * batch * length * config.dim * bytes_per_element


def flops_per_token(config: GPTConfig, context: int) -> float:
    """FLOPs to process one token that attends to ``context`` positions: 2 per weight of every matmul, plus
    the attention scores and the weighted sum (2 × 2 × context × dim per layer)."""
    check_instance("config", config, GPTConfig, hint="pass the model's GPTConfig, e.g. model.config")
    check_int("context", context, minimum=0, maximum=2**30, hint="pass how many positions the token attends to")
    matmul_weights = config.n_layer * 12 * config.dim**2 + config.dim * config.vocab_size
    return 2.0 * matmul_weights + 4.0 * config.n_layer * context * config.dim
