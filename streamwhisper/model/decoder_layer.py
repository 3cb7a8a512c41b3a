"""One decoder block's computation, as plain calls over its modules' forward methods.

A decoded token runs four or six blocks (tiny, base) of about fifteen small operations each, on
one row of 384 or 512 values, and calling them through nn.Module costs as much as many of the
kernels: its ``__call__`` (hooks, dispatch) and its attribute lookup of a submodule
(``block.attn``, about 1 us on an AVX2 EPYC: it falls through to ``__getattr__``).
:class:`LayerKernels` holds a block's modules' bound ``forward`` methods, gathered from their
registries once per decoder pass, and :func:`decoder_layer` is the block over them: the only
implementation of it. Module hooks are not called. A decoder step on tiny.en takes about 10 %
less than with the modules called (docs/benchmarks.md, "A decoder step without module calls").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import torch.nn.functional as F
from torch import Tensor, nn

from .attention import SelfAttention, cross_attend, merge_heads, self_attend, split_heads, split_qkv
from .kv_cache import KVCache

Kernel = Callable[[Tensor], Tensor]


class LayerKernels(NamedTuple):
    """A decoder block's modules' ``forward`` methods, and its head count."""

    attn_ln: Kernel
    qkv: Kernel
    attn_out: Kernel
    cross_ln: Kernel
    query: Kernel
    cross_out: Kernel
    mlp_ln: Kernel
    fc1: Kernel
    fc2: Kernel
    n_head: int

    @classmethod
    def of(cls, block: nn.Module) -> LayerKernels:
        """A :class:`~.whisper.DecoderBlock`'s. Gathered anew each pass, never kept: a model's
        modules may be replaced (quantisation) or their weights swapped after one."""
        parts = _children(block)
        attn = cast(SelfAttention, parts["attn"])
        own, cross, mlp = _children(attn), _children(parts["cross_attn"]), _children(parts["mlp"])
        return cls(
            parts["attn_ln"].forward, own["qkv"].forward, own["out"].forward,
            parts["cross_attn_ln"].forward, cross["query"].forward, cross["out"].forward,
            parts["mlp_ln"].forward, mlp["0"].forward, mlp["2"].forward, attn.n_head,
        )  # fmt: skip


def _children(module: nn.Module) -> dict[str, nn.Module]:
    """``module``'s submodules by name: nn.Module's own registry, a plain dict (``module.name``
    falls through to nn.Module's ``__getattr__``)."""
    return cast(dict[str, nn.Module], module._modules)


def decoder_layer(
    kern: LayerKernels,
    x: Tensor,
    cache: KVCache,
    layer: int,
    mask: Tensor | None,
    want_qk: bool,
    heads: Sequence[int] = (),
) -> tuple[Tensor, Tensor | None]:
    """Block ``layer`` over ``x`` (B, T, D), the T tokens after ``cache.length`` cached ones.

    ``mask``: self-attention's, broadcastable to (B, H, T, past + T). ``want_qk``: every head's
    cross-attention scores; else ``heads``' only (or None).
    """
    q, k, v = split_qkv(kern.qkv(kern.attn_ln(x)), kern.n_head)
    k, v = cache.extend_self(layer, k, v)  # (B, H, past + T, Dh)
    x = x + kern.attn_out(merge_heads(self_attend(q, k, v, mask, causal=True)))
    k, v = cache.cross(layer)
    cross_mask = cache.cross_mask
    q = kern.query(kern.cross_ln(x))
    if cache.shares_cross and not want_qk:
        # beams of one window: their queries side by side against one copy of the keys
        b, t, d = q.shape
        k, v, cross_mask = k[:1], v[:1], None if cross_mask is None else cross_mask[:1]
        attended, qk = cross_attend(split_heads(q.reshape(1, b * t, d), kern.n_head), k, v, cross_mask, False, heads)
        out = merge_heads(attended).reshape(b, t, d)
        if qk is not None:  # (1, h, b * t, S) -> (b, h, t, S)
            qk = qk.reshape(len(heads), b, t, -1).transpose(0, 1)
    else:
        attended, qk = cross_attend(split_heads(q, kern.n_head), k, v, cross_mask, want_qk, () if want_qk else heads)
        out = merge_heads(attended)
    x = x + kern.cross_out(out)
    return x + kern.fc2(F.gelu(kern.fc1(kern.mlp_ln(x)))), qk
