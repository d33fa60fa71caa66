"""A small GPT-style decoder and the ways to generate text with it (notebook 10).

The model is deliberately plain (learned positions, pre-norm blocks, ``scaled_dot_product_attention``) so that
every cost in decoding can be read off it:

- ``GPT(config)``: token + position embeddings, ``n_layer`` blocks, a final norm and an output projection.
- ``model(tokens, pos)`` runs ``tokens`` (batch × T) at absolute positions ``pos`` (T,) and returns logits for
  every position. Without a cache the T tokens attend causally to each other (the recompute-everything way).
- ``model.setup_cache("dynamic" | "static" | "int8", batch, max_len)`` gives every attention layer a KV cache:
  ``DynamicKVCache`` grows by concatenation (new shapes every step: what a first implementation writes);
  ``StaticKVCache`` is preallocated to ``max_len`` and written in place at ``pos`` (fixed shapes: what
  ``torch.compile`` and CUDA graphs need; gpt-fast's design). ``model.clear_cache()`` removes them.
- ``generate_uncached`` / ``generate``: greedy decoding that returns the tokens and the logits of every step,
  so that two ways of decoding can be compared exactly.
- ``kv_cache_bytes``, ``decode_weight_bytes``, ``flops_per_token``: the bytes and FLOPs that set decoding's
  roofline.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_callable, check_choice, check_instance, check_int
from .device import choose_device
from .paths import DATA_DIR, verify_shipped

__all__ = [
    "GPTConfig",
    "GPT",
    "StaticKVCache",
    "Int8KVCache",
    "DynamicKVCache",
    "PagedKVCache",
    "BlockTable",
    "generate",
    "generate_uncached",
    "speculative_generate",
    "decode_step",
    "greedy_step",
    "prefill",
    "prefill_bucketed",
    "kv_cache_bytes",
    "decode_weight_bytes",
    "flops_per_token",
    "linear_weight_bytes",
    "trained_lm",
    "device_sized_config",
    "cuda_graph",
    "lm_metrics",
    "bits_per_byte",
    "batch_consistency",
    "encode",
    "decode",
]

LM_NAMES = ("target", "draft")


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the decoder. ``dim`` must be a multiple of ``n_head``."""

    vocab_size: int = 1024
    n_layer: int = 4
    n_head: int = 4
    dim: int = 256
    max_seq_len: int = 512
    n_kv_heads: int | None = None  # grouped-query attention: fewer key/value heads than query heads

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "dim", "max_seq_len"):
            value = getattr(self, name)
            check_int(f"GPTConfig.{name}", value, hint="give every size of the decoder as a positive integer")
        if self.dim % self.n_head:
            raise ValueError(
                f"GPTConfig: dim={self.dim} is not a multiple of n_head={self.n_head}; "
                "pick a dim that n_head divides (each head gets dim // n_head channels)."
            )
        if self.n_kv_heads is not None:
            check_int("GPTConfig.n_kv_heads", self.n_kv_heads, hint="give the number of key/value heads, or None")
            if self.n_head % self.n_kv_heads:
                raise ValueError(
                    f"GPTConfig: n_head={self.n_head} is not a multiple of n_kv_heads={self.n_kv_heads}; "
                    "each key/value head serves the same number of query heads (None: one per query head)."
                )

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``n_head`` (multi-head attention) unless ``n_kv_heads`` says fewer (GQA; 1 = MQA)."""
        return self.n_head if self.n_kv_heads is None else self.n_kv_heads


def _check_cache_args(batch: int, max_len: int, limit: int) -> None:
    check_int("batch", batch, hint="a KV cache holds one row per sequence: pass the batch size of the prompts")
    check_int("max_len", max_len, maximum=limit, hint=f"a cache holds at most the model's max_seq_len ({limit})")


class StaticKVCache(nn.Module):
    """Keys and values for ``max_len`` positions, allocated once and written in place: the shapes never change,
    so a compiled decode step is compiled once and can be captured in a CUDA graph.

    Each row holds one sequence. ``pos`` is either one position per new token shared by every row (``(T,)``:
    the batch moves in lockstep) or one per row and token (``(n, T)``: each sequence at its own position, what
    continuous batching needs); ``slots`` (``(n,)``) picks the rows the ``n`` sequences live in (default: all)."""

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
        for name, value in (("batch", batch), ("n_head", n_head), ("max_len", max_len), ("head_dim", head_dim)):
            check_int(name, value, hint="a KV cache's sizes are positive integers")
        shape = (batch, n_head, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(
        self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._write(pos, slots, ((self.k, k), (self.v, v)))
        return (self.k, self.v) if slots is None else (self.k[slots], self.v[slots])

    def _write(
        self, pos: torch.Tensor, slots: torch.Tensor | None, pairs: tuple[tuple[torch.Tensor, ...], ...]
    ) -> None:
        """Write each ``(buffer, new)`` of ``pairs`` (new: sequences × heads × T × …) at positions ``pos``."""
        n = pairs[0][1].shape[0]
        if pos.dim() == 1 and slots is None:  # the whole batch at the same positions
            for buffer, new in pairs:
                buffer.index_copy_(2, pos, new)
            return
        if slots is None and n != self.k.shape[0]:
            raise ValueError(f"{n} sequences for a cache of {self.k.shape[0]} rows: pass slots= (which rows they use).")
        rows = torch.arange(n, device=pos.device) if slots is None else slots
        where = (rows[:, None], slice(None), pos.expand(n, -1))  # row r, every head, its own positions
        for buffer, new in pairs:
            buffer[where] = new.transpose(1, 2)

    def mask(self, pos: torch.Tensor) -> torch.Tensor:
        """Which cached positions each new token sees: every key at a position ≤ its own (the slots not
        written yet, or left by an earlier sequence of the row, are at later positions and hidden)."""
        keys = torch.arange(self.k.shape[2], device=pos.device)
        if pos.dim() == 1:
            return pos[:, None] >= keys[None, :]  # (T, max_len), shared by every row
        return (pos[:, :, None] >= keys)[:, None]  # (n, 1, T, max_len): a mask per row

    @property
    def empty(self) -> bool:
        return False  # it always holds max_len slots; the mask hides the ones not written yet


class Int8KVCache(StaticKVCache):
    """A static cache that stores keys and values in int8: each cached vector (one sequence, one head, one
    position) with its own scale, its largest magnitude ÷ 127, kept in fp32. That is ``head_dim + 4`` bytes per
    vector instead of ``4 × head_dim`` (fp32) or ``2 × head_dim`` (bf16), for one rounding of every cached value,
    at most half a step of its scale (a scale per token and head, as KIVI does for values; vLLM's fp8 cache uses
    coarser, per-tensor scales). ``update``
    writes the new positions quantized and returns the cache dequantized to ``dtype``: written out in PyTorch, so
    every step also reads and writes the whole cache in ``dtype`` once more; a fused attention kernel dequantizes
    as it reads, which is where fewer bytes become less time."""

    def __init__(
        self,
        batch: int,
        n_head: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(batch, n_head, max_len, head_dim, torch.int8, device)
        self.out_dtype = dtype
        shape = (batch, n_head, max_len, 1)
        self.register_buffer("k_scale", torch.ones(shape, dtype=torch.float32, device=device), persistent=False)
        self.register_buffer("v_scale", torch.ones(shape, dtype=torch.float32, device=device), persistent=False)

    @staticmethod
    def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (..., head_dim) → int8 values and fp32 scales (..., 1); ``q * scale`` is within ``scale / 2``."""
        x = x.float()
        scale = x.abs().amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 127
        return torch.round(x / scale).clamp_(-127, 127).to(torch.int8), scale

    def _dequantized(self, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        pick = (lambda t: t) if rows is None else (lambda t: t[rows])
        return tuple(
            (pick(q).float() * pick(s)).to(self.out_dtype) for q, s in ((self.k, self.k_scale), (self.v, self.v_scale))
        )

    def update(
        self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        (kq, ks), (vq, vs) = self.quantize(k), self.quantize(v)
        self._write(pos, slots, ((self.k, kq), (self.v, vq), (self.k_scale, ks), (self.v_scale, vs)))
        return self._dequantized(slots)


class DynamicKVCache(nn.Module):
    """Keys and values appended with ``torch.cat`` at every step: simple, but every step allocates new,
    larger tensors and changes shapes (a compiled step would recompile)."""

    def __init__(self) -> None:
        super().__init__()
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(
        self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if pos.dim() != 1 or slots is not None:
            raise ValueError(
                "a dynamic KV cache moves the whole batch in lockstep: pass one position per new token (a 1-D pos) "
                "and no slots, or use a static cache (model.setup_cache('static', ...)) for per-sequence positions."
            )
        if pos.device.type == "cpu" and pos.numel() and not torch.compiler.is_compiling():
            expected = 0 if self.k is None else self.k.shape[2]
            if int(pos[0]) != expected or int(pos[-1]) != expected + pos.numel() - 1:
                raise ValueError(
                    f"positions {int(pos[0])}…{int(pos[-1])} do not continue this dynamic cache of {expected} "
                    f"positions: pass the next ones ({expected}…), or model.clear_cache() to start again."
                )
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def mask(self, pos: torch.Tensor) -> torch.Tensor:
        keys = torch.arange(0 if self.k is None else self.k.shape[2], device=pos.device)
        return pos[:, None] >= keys[None, :]

    @property
    def empty(self) -> bool:
        return self.k is None


class BlockTable:
    """The block allocator of a paged KV cache (vLLM's PagedAttention): a pool of ``num_blocks`` blocks of
    ``block_size`` positions, shared by every layer; each sequence owns a list of blocks, allocated when its
    length reaches them and returned when it ends. A block may be shared by several sequences (a common prefix,
    counted by reference); only full blocks are shared, as vLLM's automatic prefix caching does."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        check_int("num_blocks", num_blocks, maximum=2**24, hint="pass how many blocks the pool holds")
        check_int("block_size", block_size, maximum=4096, hint="pass the positions per block, e.g. 16")
        self.num_blocks, self.block_size = num_blocks, block_size
        # block 0 is never handed out: short rows of a table are padded with it (vLLM keeps such a null block)
        self.free: list[int] = list(range(num_blocks, 0, -1))  # pop() hands out block 1 first
        self.refs = [0] * (num_blocks + 1)
        self.blocks: dict[object, list[int]] = {}
        self.current: torch.Tensor | None = None  # (n, max blocks) table of the sequences in this forward

    def reserve(self, seq: object, length: int) -> None:
        """Give ``seq`` blocks for its first ``length`` positions (allocates only the missing ones)."""
        check_int("length", length, hint="how many positions the sequence needs")
        owned = self.blocks.setdefault(seq, [])
        need = -(-length // self.block_size) - len(owned)
        if need > len(self.free):
            raise MemoryError(
                f"the paged KV cache is full: {need} more blocks wanted, {len(self.free)} free of "
                f"{self.num_blocks}; free finished sequences (release) or make the pool larger."
            )
        for _ in range(need):
            block = self.free.pop()
            self.refs[block] = 1
            owned.append(block)

    def share(self, source: object, seq: object, length: int) -> int:
        """Start ``seq`` with the full blocks of ``source``'s first ``length`` positions (no copy); returns how
        many positions it now shares, which its prefill can skip."""
        if seq in self.blocks:
            raise ValueError(f"sequence {seq!r} already has blocks: share a prefix before reserving any.")
        if source not in self.blocks:
            raise ValueError(f"no sequence {source!r} holds blocks: reserve and prefill it first.")
        shared = self.blocks[source][: length // self.block_size]
        for block in shared:
            self.refs[block] += 1
        self.blocks[seq] = list(shared)
        return len(shared) * self.block_size

    def release(self, seq: object) -> None:
        """Return ``seq``'s blocks; a block shared with another sequence stays until its last user ends."""
        for block in self.blocks.pop(seq, []):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free.append(block)

    def use(self, seqs: list, device: torch.device | str | None = None) -> None:
        """Set the table the next forward reads: one row of block numbers per sequence of the batch, in order
        (short rows padded with block 0, whose positions the mask hides)."""
        missing = [s for s in seqs if s not in self.blocks]
        if missing or not seqs:
            raise ValueError(f"no blocks for {missing or 'an empty batch'}: reserve(seq, length) before use([...]).")
        rows = [self.blocks[s] for s in seqs]
        width = max(len(r) for r in rows)
        self.current = torch.tensor([r + [0] * (width - len(r)) for r in rows], device=device)
        self.capacity = torch.tensor([[len(r) * self.block_size] for r in rows], device=device)

    @property
    def used(self) -> int:
        """Blocks in use (a shared block counted once; the null block not counted)."""
        return self.num_blocks - len(self.free)


class PagedKVCache(nn.Module):
    """One layer's keys and values in fixed-size blocks of a shared pool, found through a :class:`BlockTable`:
    memory grows with the tokens a sequence really has, not with the longest it might reach. Attention gathers
    each sequence's blocks into a contiguous view (a real engine's kernel reads the blocks in place)."""

    def __init__(
        self,
        table: BlockTable,
        n_head: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_instance("table", table, BlockTable, hint="pass the model's BlockTable (model.setup_paged_cache)")
        check_int("n_head", n_head, hint="key/value heads: a positive integer")
        check_int("head_dim", head_dim, hint="a positive integer")
        self.table = table
        shape = (table.num_blocks + 1, n_head, table.block_size, head_dim)  # + the null block 0
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(
        self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.table.current
        if table is None or table.shape[0] != k.shape[0]:
            raise ValueError("call table.use(seqs) with one sequence per row of the batch before the forward.")
        table = table.to(pos.device)  # the table is built on the host; the positions live with the model
        pos = pos.expand(k.shape[0], -1)
        if bool((pos >= self.table.capacity.to(pos.device)).any()):  # one check per forward: a teaching cache
            raise ValueError("a position lies past the blocks reserved for its sequence: reserve(seq, length) first.")
        size = self.table.block_size
        block = table.gather(1, pos // size)  # (n, T): the block each new position lives in
        self.k[block, :, pos % size] = k.transpose(1, 2)
        self.v[block, :, pos % size] = v.transpose(1, 2)
        n, width = table.shape
        # (n, blocks, heads, block_size, head_dim) → (n, heads, blocks × block_size, head_dim)
        gather = lambda pool: pool[table].transpose(1, 2).reshape(n, pool.shape[1], width * size, -1)  # noqa: E731
        return gather(self.k), gather(self.v)

    def mask(self, pos: torch.Tensor) -> torch.Tensor:
        keys = torch.arange(self.table.current.shape[1] * self.table.block_size, device=pos.device)
        pos = pos.expand(self.table.current.shape[0], -1)
        return (pos[:, :, None] >= keys)[:, None]

    @property
    def empty(self) -> bool:
        return False


class Attention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = config.n_head, config.kv_heads, config.head_dim
        self.qkv = nn.Linear(config.dim, config.dim + 2 * self.n_kv * self.head_dim, bias=False)
        self.proj = nn.Linear(config.dim, config.dim, bias=False)
        self.cache: StaticKVCache | DynamicKVCache | PagedKVCache | None = None

    def forward(self, x: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        kv = self.n_kv * self.head_dim
        q, k, v = self.qkv(x).split([d, kv, kv], dim=2)
        q = q.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k, v = (z.view(b, t, self.n_kv, self.head_dim).transpose(1, 2) for z in (k, v))
        gqa = {"enable_gqa": True} if self.n_kv != self.n_head else {}  # a key/value head serves several queries
        if self.cache is None or self.cache.empty:
            # all keys are the T new tokens (no cache, or the first fill of a dynamic one): plain causal attention
            if self.cache is not None:
                k, v = self.cache.update(pos, k, v, slots)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, **gqa)
        else:
            k, v = self.cache.update(pos, k, v, slots)
            # query at position p sees every key at a position ≤ p (unwritten static slots are masked out)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.cache.mask(pos), **gqa)
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

    def forward(self, x: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), pos, slots)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """A GPT-style decoder with random weights (see the module docstring)."""

    def __init__(self, config: GPTConfig, seed: int = 0) -> None:
        super().__init__()
        check_instance("config", config, GPTConfig, hint="pass a helpers.llm.GPTConfig, e.g. GPTConfig(n_layer=2)")
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

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for every position of ``tokens`` (n × T) at positions ``pos``: ``(T,)`` shared by every row, or
        ``(n, T)`` one per row; with a static cache, ``slots`` (n,) names the cache rows the sequences use."""
        if not torch.compiler.is_compiling():  # eager calls only: nothing here reaches a compiled graph
            self._check_inputs(tokens, pos)
            self._check_cache(pos)
        x = self.tok(tokens) + self.pos(pos)
        for block in self.blocks:
            x = block(x, pos, slots)
        return self.head(self.norm(x))

    def _check_inputs(self, tokens: torch.Tensor, pos: torch.Tensor) -> None:
        """Shapes and dtypes always (no device read); the values of ids and positions on the CPU only, where reading
        them costs no sync (on a GPU an id out of range is a device-side assert: :func:`generate` checks its prompt)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError("tokens must be an (n, T) tensor of token ids (dtype torch.long), e.g. encode(text).")
        if tokens.shape[1] == 0 or tokens.shape[0] == 0:
            raise ValueError(f"tokens {tuple(tokens.shape)} holds no token: pass at least one row of one token.")
        if not isinstance(pos, torch.Tensor) or pos.dtype != torch.long or pos.shape[-1:] != tokens.shape[-1:]:
            raise ValueError(
                f"pos must be a torch.long tensor of T = {tokens.shape[-1]} positions, (T,) or (n, T), one per token."
            )
        if tokens.device.type == "cpu" and tokens.numel():
            cfg = self.config
            if int(tokens.min()) < 0 or int(tokens.max()) >= cfg.vocab_size:
                raise ValueError(f"token ids must be in 0…{cfg.vocab_size - 1}, this model's vocabulary.")
            if int(pos.min()) < 0 or int(pos.max()) >= cfg.max_seq_len:
                raise ValueError(f"positions must be in 0…{cfg.max_seq_len - 1}: the model's max_seq_len.")

    def _check_cache(self, pos: torch.Tensor) -> None:
        """One line instead of a bare error from deep inside the cache's update, for two mistakes: a static cache
        made under ``torch.inference_mode`` (as :func:`generate` makes it) used outside it, and, on the CPU (where
        reading ``pos`` costs no device sync), a position past the cache's end. On a GPU the position is not read:
        that would make every eager step wait for the device (a handicap the eager baseline must not carry), and
        :func:`generate` and :func:`speculative_generate` check their lengths on the host before they start."""
        cache = self.blocks[0].attn.cache
        if not isinstance(cache, StaticKVCache):
            return
        if cache.k.is_inference() and not torch.is_inference_mode_enabled():
            raise RuntimeError(
                "this model keeps a KV cache made under torch.inference_mode (by generate, or a call there): run "
                "it under torch.inference_mode() too, or call model.clear_cache() first."
            )
        if pos.device.type == "cpu" and pos.numel() and int(pos.max()) >= cache.k.shape[2]:
            raise ValueError(
                f"position {int(pos.max())} is past this static cache's {cache.k.shape[2]} positions: set up a "
                "longer one (model.setup_cache('static', batch, max_len))."
            )

    def setup_cache(self, kind: str, batch: int = 1, max_len: int | None = None) -> None:
        """Give every attention layer a KV cache: ``"static"`` (preallocated to ``max_len``, default the
        model's ``max_seq_len``, in the model's dtype and device), ``"int8"`` (the same, stored in int8:
        :class:`Int8KVCache`) or ``"dynamic"`` (grown by concatenation).

        A static cache of the same shape, dtype and device is kept, not reallocated (as gpt-fast does): its
        buffers keep their addresses, which a CUDA graph recorded on them needs. It needs no zeroing: every
        position is written before a query can see it, and the mask hides the others."""
        cfg = self.config
        max_len = cfg.max_seq_len if max_len is None else max_len
        check_choice(
            "kind",
            kind,
            ("static", "dynamic", "int8"),
            hint="a KV cache is preallocated (static, or int8) or concatenated",
        )
        _check_cache_args(batch, max_len, cfg.max_seq_len)
        current = self.blocks[0].attn.cache
        if (
            kind == "static"
            and isinstance(current, StaticKVCache)
            and current.k.dtype == self.dtype
            and current.k.device == self.device
            and current.k.shape == (batch, cfg.kv_heads, max_len, cfg.head_dim)
        ):
            return
        for block in self.blocks:
            sizes = (batch, cfg.kv_heads, max_len, cfg.head_dim, self.dtype, self.device)
            block.attn.cache = (
                {"static": StaticKVCache, "int8": Int8KVCache}[kind](*sizes)
                if kind != "dynamic"
                else (DynamicKVCache())
            )

    def setup_paged_cache(self, num_blocks: int, block_size: int = 16) -> BlockTable:
        """Give every attention layer a :class:`PagedKVCache` over one shared :class:`BlockTable` (returned:
        reserve blocks for a sequence and ``use`` the table before each forward)."""
        table = BlockTable(num_blocks, block_size)
        cfg = self.config
        for block in self.blocks:
            block.attn.cache = PagedKVCache(table, cfg.kv_heads, cfg.head_dim, self.dtype, self.device)
        return table

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
                total += sum(getattr(cache, s).nbytes for s in ("k_scale", "v_scale") if hasattr(cache, s))
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
    if prompt.shape[1] == 0:
        raise ValueError("the prompt is empty: a model needs at least one token to continue, e.g. encode('The').")
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
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] == 0:
        got = tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"prompt {got} is not a batch of token ids with at least one token: pass (batch, tokens).")
    _check_has_cache(model, "prefill")
    return model(prompt, torch.arange(prompt.shape[1], device=prompt.device))[:, -1]


def decode_step(model: GPT, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """One decoding step: ``token`` (batch × 1) at position ``pos`` (a one-element tensor) → next logits.
    This is the function to compile: with a static cache its shapes never change."""
    if not torch.compiler.is_compiling():  # an attribute read, no device sync; nothing of it enters a graph
        _check_has_cache(model, "decode_step")
    return model(token, pos)[:, -1]


def _check_has_cache(model: GPT, what: str) -> None:
    """Without a cache a step sees only its own token: logits that look right and are not (one line instead)."""
    blocks = getattr(getattr(model, "_orig_mod", model), "blocks", None)  # a torch.compile'd GPT too
    if blocks is not None and len(blocks) and getattr(blocks[0].attn, "cache", True) is None:
        raise ValueError(
            f"{what} needs a model with a KV cache (without one a step sees only its own tokens): call "
            "model.setup_cache('static', batch, max_len) or model.setup_cache('dynamic') first."
        )


def prefill_bucketed(
    model: GPT,
    prompt: torch.Tensor,
    buckets: Sequence[int],
    run: Callable[[GPT, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """Prefill ``prompt`` (batch × P) padded on the right up to the smallest of ``buckets`` that holds it, so a
    prefill compiled for fixed shapes (``run``, e.g. ``torch.compile(model, dynamic=False)``) is compiled once per
    bucket instead of once per prompt length; returns the logits of the last real position. Causal attention
    never lets a real token see the padding, and the cache positions the padding writes are overwritten by the
    decode steps before any query can see them. Needs a static cache of at least the bucket's length."""
    check_instance("model", model, GPT, hint="pass a helpers.llm.GPT with a static cache")
    _check_ids("prompt", prompt, model.config.vocab_size)
    if run is not None:
        check_callable("run", run, hint="pass a compiled prefill (e.g. torch.compile(model, dynamic=False)), or None")
    if not buckets or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in buckets):
        raise ValueError(f"buckets must be positive whole prompt lengths, e.g. (32, 64, 128); got {buckets!r}.")
    cache = model.blocks[0].attn.cache
    n = prompt.shape[1]
    fitting = [b for b in buckets if b >= n]
    if not fitting:
        raise ValueError(f"a {n}-token prompt fits none of the buckets {list(buckets)}: add a larger bucket.")
    size = min(fitting)
    if not isinstance(cache, StaticKVCache) or cache.k.shape[2] < size:
        raise ValueError(
            f"prefill_bucketed needs a static cache of at least {size} positions: model.setup_cache("
            f"'static', batch, max_len) first (padding would stay in a dynamic cache)."
        )
    padded = F.pad(prompt, (0, size - n))
    run = model if run is None else run
    return run(padded, torch.arange(size, device=prompt.device))[:, n - 1]


def greedy_step(model: GPT, token: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`decode_step` with the greedy choice made inside: ``(next token (batch × 1), logits)``. Compiled,
    the argmax is part of the graph, as gpt-fast samples inside its compiled step: no separate kernel launch
    and no read-back per token to choose it. :func:`generate` accepts it as ``step``."""
    logits = model(token, pos)[:, -1]
    return logits.argmax(-1, keepdim=True), logits


@torch.inference_mode()
def generate(
    model: GPT,
    prompt: torch.Tensor,
    new_tokens: int,
    cache: str = "static",
    step: Callable[[GPT, torch.Tensor, torch.Tensor], Any] | None = None,
    max_len: int | None = None,
    force: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding with a KV cache (``"static"``, ``"int8"`` or ``"dynamic"``): the prompt is prefilled once,
    then one token per step. ``step`` replaces :func:`decode_step` (e.g. a compiled one, or :func:`greedy_step`, which
    returns the next token with the logits). Returns ``(tokens, logits)``
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
    step: Callable[[GPT, torch.Tensor, torch.Tensor], Any],
    force: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # Everything a step reads is on the device before the loop: creating a GPU tensor from a Python number
    # inside it would be a blocking copy per token. The position is advanced in place (gpt-fast's way), and a
    # forced token is a contiguous (batch, 1) column like the model's own choice (else the compiled step would
    # see other strides and compile again).
    pos = torch.tensor([prompt.shape[1]], device=prompt.device)
    forced = None if force is None else force.to(prompt.device).t().contiguous()
    out = prefill(model, prompt)
    token = out.argmax(-1, keepdim=True)
    tokens, logits = [], []
    for i in range(new_tokens):
        logits.append(out.float())
        tokens.append(token)
        if i + 1 < new_tokens:
            fed = token if forced is None else forced[i].unsqueeze(1).clone()
            result = step(model, fed, pos)
            if isinstance(result, tuple):  # a step that chose the next token itself (greedy_step)
                token, out = (t.clone() for t in result)  # clone: a CUDA-graph step reuses its output buffers
            else:
                out = result.clone()
                token = out.argmax(-1, keepdim=True)
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
    check_instance("model", model, nn.Module, hint="pass the model, e.g. a helpers.llm.GPT")
    norms = sum(p.nbytes for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters())
    return linear_weight_bytes(model) + norms


def kv_cache_bytes(config: GPTConfig, batch: int, length: int, bytes_per_element: int = 4) -> int:
    """Bytes of a KV cache: keys and values (2) × layers × batch × length × kv_heads × head_dim (= dim with
    one key/value head per query head; grouped-query attention divides it by n_head / n_kv_heads)."""
    check_instance("config", config, GPTConfig, hint="pass the model's GPTConfig, e.g. model.config")
    check_int("batch", batch, maximum=2**20)
    check_int("length", length, maximum=2**30)
    check_int("bytes_per_element", bytes_per_element, maximum=16)
    return 2 * config.n_layer * batch * length * config.kv_heads * config.head_dim * bytes_per_element


def flops_per_token(config: GPTConfig, context: int) -> float:
    """FLOPs to process one token that attends to ``context`` positions: 2 per weight of every matmul, plus
    the attention scores and the weighted sum (2 × 2 × context × dim per layer)."""
    check_instance("config", config, GPTConfig, hint="pass the model's GPTConfig, e.g. model.config")
    check_int("context", context, minimum=0, maximum=2**30, hint="pass how many positions the token attends to")
    kv = config.kv_heads * config.head_dim  # keys and values: dim each with one key/value head per query head
    per_layer = config.dim * (config.dim + 2 * kv) + config.dim**2 + 8 * config.dim**2  # qkv, proj, MLP
    matmul_weights = config.n_layer * per_layer + config.dim * config.vocab_size
    return 2.0 * matmul_weights + 4.0 * config.n_layer * context * config.dim


@torch.inference_mode()
def speculative_generate(
    target: GPT, draft: GPT, prompt: torch.Tensor, new_tokens: int, gamma: int = 4
) -> tuple[torch.Tensor, dict[str, int]]:
    """Greedy speculative decoding (Leviathan et al., 2023; Chen et al., 2023) of one prompt (1 × P): the draft
    proposes ``gamma`` tokens one at a time, the target checks them all in one forward pass, the longest prefix
    it agrees with is kept and the target's own next token is added (so every pass yields 1…gamma + 1 tokens).
    The tokens are the target's greedy tokens, exactly as :func:`generate` returns them.

    Returns ``(tokens, stats)``: tokens ``1 × new_tokens`` and counts ``target_passes`` (prefill excluded),
    ``proposed``, ``accepted``, ``rejected`` (passes that stopped at a rejected proposal) and ``draft_steps``.
    ``accepted / proposed`` is the draft's acceptance *rate* (what vLLM reports); the probability that a
    proposal is accepted once the ones before it were, the α of the speed-up formula, is estimated by
    ``accepted / (accepted + rejected)``."""
    _check_tokens(target, prompt, new_tokens)
    check_instance("draft", draft, GPT, hint="pass the smaller helpers.llm.GPT that shares the target's tokens")
    check_int("gamma", gamma, maximum=64, hint="the draft proposes gamma tokens per target pass, e.g. 4")
    if prompt.shape[0] != 1 or draft.config.vocab_size != target.config.vocab_size:
        raise ValueError("speculative_generate decodes one prompt (1 × P) with a draft of the same vocabulary.")
    total = prompt.shape[1] + new_tokens  # a round never checks past the last token it may keep
    if total > min(target.config.max_seq_len, draft.config.max_seq_len):
        raise ValueError(f"prompt + new_tokens = {total} positions exceeds a model's max_seq_len.")
    device = prompt.device
    target.setup_cache("static", 1, total)
    draft.setup_cache("static", 1, total)
    seq = prompt[0].tolist()
    out = [int(prefill(target, prompt).argmax(-1))]
    draft_seen = 0  # positions of the draft's cache that hold the right tokens
    stats = {"target_passes": 0, "proposed": 0, "accepted": 0, "rejected": 0, "draft_steps": 0}
    while len(out) < new_tokens:
        length, g = len(seq) + len(out), min(gamma, new_tokens - len(out))
        # the draft catches up with the tokens it has not seen (1 or 2), then proposes g tokens
        feed = (seq + out)[draft_seen:]
        logits = draft(torch.tensor([feed], device=device), torch.arange(draft_seen, length, device=device))[:, -1]
        proposal = [int(logits.argmax(-1))]
        for i in range(g - 1):
            pos = torch.tensor([length + i], device=device)
            proposal.append(int(decode_step(draft, torch.tensor([[proposal[-1]]], device=device), pos).argmax(-1)))
        stats["draft_steps"] += g
        # the target scores its last token and the g proposals in one pass: g + 1 next-token choices
        check = torch.tensor([[out[-1], *proposal]], device=device)
        choice = target(check, torch.arange(length - 1, length + g, device=device))[0].argmax(-1).tolist()
        k = 0
        while k < g and proposal[k] == choice[k]:
            k += 1
        out += proposal[:k] + [choice[k]]
        draft_seen = length + min(k, g - 1)
        stats["target_passes"] += 1
        stats["proposed"] += g
        stats["accepted"] += k
        stats["rejected"] += k < g
    return torch.tensor([out[:new_tokens]], device=device), stats


def device_sized_config(device: torch.device | str, mode: str) -> GPTConfig:
    """Notebook 10's decoder, sized so decoding is memory-bound on the device as a real LLM's is (weights far
    larger than the CPU's caches; on a GPU, enough bytes per step to outweigh the launches): a small one in quick
    mode; 12 layers of dim 512 (55 M parameters, 0.2 GB in fp32) on a CPU; 12 × 2048 (0.7 B) on a GPU with more
    than 24 GiB free (12 × 1024 below that)."""
    check_choice("mode", mode, ("quick", "full"), hint="pass the notebook's MODE")
    device = choose_device(device)
    if mode == "quick":
        return GPTConfig(vocab_size=1024, n_layer=2, n_head=4, dim=256, max_seq_len=512)
    if device.type == "cuda":  # 2.7 GB of fp32 weights, plus bf16 and int8 copies: only where memory allows
        big = torch.cuda.mem_get_info(device)[0] > 24 * 2**30
        return GPTConfig(vocab_size=32000, n_layer=12, n_head=16, dim=2048 if big else 1024, max_seq_len=2048)
    return GPTConfig(vocab_size=16384, n_layer=12, n_head=8, dim=512, max_seq_len=1024)


def encode(text: str, device: torch.device | str | None = None) -> torch.Tensor:
    """Text → the trained models' tokens: its UTF-8 bytes (ids 0…255), as a ``1 × n`` tensor."""
    if not isinstance(text, str):
        raise ValueError(f"encode takes a str, not {type(text).__name__}: pass the text of the prompt.")
    if not text:
        raise ValueError("encode got an empty text: a prompt needs at least one character.")
    device = None if device is None else choose_device(device)
    return torch.tensor([list(text.encode("utf-8"))], dtype=torch.long, device=device)


def decode(ids: torch.Tensor | Sequence[int]) -> str:
    """Tokens (bytes) → text; a byte sequence that is not valid UTF-8 shows as U+FFFD."""
    if isinstance(ids, torch.Tensor) and (ids.dtype.is_floating_point or ids.dtype == torch.bool):
        raise ValueError(f"ids must be integer token ids, got a {ids.dtype} tensor.")
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (torch.Tensor, Sequence)):
        raise TypeError(f"ids must be a tensor or list of byte token ids, got {type(ids).__name__}.")
    if isinstance(ids, torch.Tensor) and ids.dim() > 1 and (ids.dim() > 2 or ids.shape[0] != 1):
        raise ValueError(f"decode reads one sequence; got a tensor of shape {tuple(ids.shape)}: pass ids[i] for row i.")
    values = ids.flatten().tolist() if isinstance(ids, torch.Tensor) else list(ids)
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 256 for v in values):
        raise ValueError("ids must be byte token ids (integers 0…255): this course's models read bytes as tokens.")
    return bytes(values).decode("utf-8", errors="replace")


def lm_metrics(data_dir: str | Path | None = None) -> dict[str, Any]:
    """What ``scripts/train_lms.py`` measured when it trained the shipped models (``data/lm.json``)."""
    root = DATA_DIR if data_dir is None else Path(data_dir)
    return json.loads(verify_shipped(root / "lm.json", root).read_text())


@torch.inference_mode()
def bits_per_byte(model: nn.Module, data: torch.Tensor, seq: int = 256, max_windows: int | None = None) -> float:
    """Held-out quality of a byte-level model: the mean cross-entropy of each next byte of ``data`` (a 1-D tensor
    of byte ids, e.g. ``load_corpus("test")``) in bits, over consecutive windows of ``seq`` bytes (the first
    ``max_windows`` of them; all by default). 8.0 is a uniform guess over 256 bytes; lower is better. The model is
    run without a cache, in its own dtype and device; the loss is computed in fp32. ``scripts/train_lms.py``
    measured the shipped models with this function (``lm_metrics()``'s ``test_bits_per_byte``)."""
    check_instance("model", model, nn.Module, hint="pass a byte-level model, e.g. trained_lm('target')")
    check_instance("data", data, torch.Tensor, hint="pass byte ids, e.g. helpers.data.load_corpus('test')")
    seq = check_int("seq", seq, minimum=1, hint="bytes per window, e.g. 256 (at most the model's max_seq_len)")
    if data.dim() != 1 or data.dtype.is_floating_point or data.dtype == torch.bool:
        raise ValueError(f"data must be a 1-D tensor of byte ids, got {data.dtype} {tuple(data.shape)}.")
    n = (len(data) - 1) // seq
    if max_windows is not None:
        n = min(n, check_int("max_windows", max_windows, hint="how many windows to score, or None for all"))
    if n < 1:
        raise ValueError(f"data holds {len(data)} bytes: fewer than one window of {seq} + 1.")
    inner = getattr(model, "_orig_mod", model)
    blocks = getattr(inner, "blocks", None)
    if blocks is not None and len(blocks) and getattr(blocks[0].attn, "cache", None) is not None:
        raise ValueError("bits_per_byte runs whole windows without a cache: call model.clear_cache() first.")
    device = next(inner.parameters()).device
    x = data[: n * seq].long().view(n, seq)
    y = data[1 : n * seq + 1].long().view(n, seq)
    pos = torch.arange(seq, device=device)
    loss = 0.0
    for xb, yb in zip(x.split(64), y.split(64), strict=True):
        logits = model(xb.to(device), pos).float().flatten(0, 1)
        loss += F.cross_entropy(logits, yb.to(device).flatten(), reduction="sum").item()
    return loss / (n * seq) / math.log(2)


@torch.inference_mode()
def batch_consistency(
    model: nn.Module,
    prompt: torch.Tensor,
    batch_sizes: Sequence[int] = (1, 8, 64),
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
    seed: int = 0,
) -> dict[int, dict[str, float | bool]]:
    """Is a request's answer independent of the batch it is served in? The logits of ``prompt`` (1 × T ids), run
    as row 0 of batches of ``batch_sizes`` rows (the other rows random requests of the same length), against the
    same prompt run alone. Per batch size: ``bitwise`` (every logit identical), ``max_abs_diff`` and
    ``same_choices`` (the fraction of the T positions whose greedy choice is unchanged). ``forward(tokens)``
    defaults to ``model(tokens, positions)`` without a cache; pass a compiled model's call to check it."""
    check_instance("model", model, nn.Module, hint="pass a language model, e.g. trained_lm('target')")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[0] != 1 or prompt.shape[1] == 0:
        raise ValueError("prompt must be one request of token ids, shape (1, T), e.g. encode('text').")
    sizes = [check_int("batch_sizes[i]", b, hint="rows per batch, e.g. (1, 8, 64)") for b in batch_sizes]
    if not sizes:
        raise ValueError("batch_sizes is empty: pass the batch sizes to compare, e.g. (1, 8, 64).")
    if forward is not None:
        check_callable("forward", forward, hint="a function of the token batch, e.g. lambda x: compiled(x, pos)")
    inner = getattr(model, "_orig_mod", model)
    blocks = getattr(inner, "blocks", None)
    if blocks is not None and len(blocks) and getattr(blocks[0].attn, "cache", None) is not None:
        raise ValueError("batch_consistency runs whole requests without a cache: call model.clear_cache() first.")
    length, device = prompt.shape[1], prompt.device
    vocab = getattr(getattr(inner, "config", None), "vocab_size", 256)
    pos = torch.arange(length, device=device)
    run = forward or (lambda tokens: model(tokens, pos))
    generator = torch.Generator().manual_seed(seed)
    others = torch.randint(0, vocab, (max(sizes) - 1, length), generator=generator).to(device)
    alone = run(prompt)[0].float()
    out = {}
    for b in sizes:
        row = run(torch.cat([prompt, others[: b - 1]]))[0].float()
        out[b] = {
            "bitwise": bool(torch.equal(row, alone)),
            "max_abs_diff": (row - alone).abs().max().item(),
            "same_choices": (row.argmax(-1) == alone.argmax(-1)).float().mean().item(),
        }
    return out


def trained_lm(
    name: str = "target", device: torch.device | str | None = None, data_dir: str | Path | None = None
) -> GPT:
    """One of the two small language models trained on the standard library's docstrings (bytes as tokens):
    ``"target"`` or ``"draft"`` (smaller, same tokens: a draft for speculative decoding), in eval mode, fp32,
    weights checked against their checksum and loaded with ``weights_only=True``."""
    check_choice("name", name, LM_NAMES, hint="the course ships a target model and its draft")
    root = DATA_DIR if data_dir is None else Path(data_dir)
    config = GPTConfig(**lm_metrics(root)["models"][name]["config"])
    model = GPT(config)
    state = torch.load(verify_shipped(root / f"lm_{name}.pt", root), map_location="cpu", weights_only=True)
    model.load_state_dict(state)  # bf16 on disk, copied into the fp32 parameters
    return model.eval().to(None if device is None else choose_device(device))


def cuda_graph(fn: Callable[..., torch.Tensor], *args: Any) -> Callable[[], torch.Tensor]:
    """Record ``fn(*args)`` as one CUDA graph (after two warm-up calls on a side stream, as PyTorch's
    documentation does) and return a function that replays it: every kernel of the call in one launch, with no
    compiler. The replay reads ``args`` at the addresses they had when recorded (update them in place; the
    returned function holds them, so they stay alive with it) and returns the same output tensor each time,
    overwritten. For timing a step whose launches would hide the
    GPU's work (eager decoding on a fast GPU)."""
    check_callable("fn", fn, hint="pass the step to record, e.g. helpers.llm.decode_step")
    tensors = [a for a in args if isinstance(a, torch.Tensor)] + [
        p for a in args if isinstance(a, nn.Module) for p in a.parameters()
    ]
    if not tensors or any(t.device.type != "cuda" for t in tensors):
        raise ValueError("cuda_graph records CUDA work: pass a model and tensors on a CUDA device.")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)

    def replay() -> torch.Tensor:
        graph.replay()
        return out

    # The graph reads its inputs at their recorded addresses: keep them alive as long as the replay is, else a
    # caller that drops its tensors (a loop that rebinds them) leaves the graph reading freed, reused memory.
    replay.inputs = args  # type: ignore[attr-defined]
    return replay
