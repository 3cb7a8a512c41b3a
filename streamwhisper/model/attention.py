"""Whisper's attention: fused-projection self- and cross-attention over (B, H, T, Dh) heads.

Self-attention's q/k/v are one Linear and cross-attention's k/v another, as CTranslate2 stores
them. Cross-attention projects a window's keys and values once (:meth:`CrossAttention.project_audio`);
every decoding step over that window reuses them from the
:class:`~streamwhisper.model.kv_cache.KVCache`. The attention itself, after the projections, is
plain functions (:func:`self_attend`, :func:`cross_attend`): the decoder calls them from
:func:`~streamwhisper.model.decoder_layer.decoder_layer`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def split_heads(x: Tensor, n_head: int) -> Tensor:
    b, t, d = x.shape
    return x.view(b, t, n_head, d // n_head).transpose(1, 2)  # (B, n_head, T, d_head)


def split_qkv(x: Tensor, n_head: int) -> tuple[Tensor, Tensor, Tensor]:
    """A fused projection (B, T, 3 * D) as query, key and value heads, each (B, n_head, T, d_head):
    views, strided as three :func:`split_heads` of its chunks would be, in three ops instead of ten."""
    b, t, d3 = x.shape
    q, k, v = x.view(b, t, 3, n_head, d3 // (3 * n_head)).permute(2, 0, 3, 1, 4).unbind(0)
    return q, k, v


def merge_heads(x: Tensor) -> Tensor:
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, n_head * d_head)


# Queries per block of blocked_attention: a block's scores (6 heads x 250 x 1500 in bfloat16,
# 4.5 MB) stay in cache.
ATTENTION_BLOCK = 250


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, block: int = ATTENTION_BLOCK) -> Tensor:
    """Attention (B, H, T, Dh) computed ``block`` queries at a time with plain matmuls.

    For the encoder's bfloat16 self-attention over 1500 frames on a CPU, this is 2.5x faster than
    PyTorch's fused kernel (8.7 ms against 21.7 ms per layer on AVX-512 BF16): the matmuls use
    the CPU's bfloat16 dot products, which the fused CPU kernel does not. Encoder 128 -> 85 ms.
    """
    q = q * q.shape[-1] ** -0.5
    # contiguous once: each block's matmul would otherwise copy the strided keys and values again
    kt, v = k.transpose(-1, -2).contiguous(), v.contiguous()
    return torch.cat([(q[:, :, i : i + block] @ kt).softmax(dim=-1) @ v for i in range(0, q.shape[2], block)], dim=2)


def self_attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
    """Self-attention of queries (B, H, T, Dh) over keys and values (B, H, S, Dh), S >= T.

    ``causal``: the T queries are the last of the S positions, each seeing those up to itself.
    """
    t, s = q.shape[2], k.shape[2]
    if mask is None and causal and t > 1 and s > t:
        # new tokens after cached ones: token i sees every cached key and new keys 0..i
        # (SDPA's is_causal aligns a non-square mask top-left, which would hide the cache)
        mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(diagonal=s - t)
    if mask is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if q.dtype == torch.bfloat16 and q.device.type == "cpu" and not causal and t >= 2 * ATTENTION_BLOCK:
        return blocked_attention(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal and t > 1)


class SelfAttention(nn.Module):
    """Multi-head self-attention with a fused q/k/v projection (key bias is zero in Whisper).

    ``forward`` is the encoder's; the decoder calls its projections with a cache
    (:func:`~streamwhisper.model.decoder_layer.decoder_layer`)."""

    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_state, 3 * n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(merge_heads(self_attend(*split_qkv(self.qkv(x), self.n_head))))


class CrossAttention(nn.Module):
    """The projections of attention from text to audio. Keys and values come from the cache,
    computed once per window (:meth:`project_audio`); the decoder projects its queries and
    attends with :func:`cross_attend`."""

    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.kv = nn.Linear(n_state, 2 * n_state)
        self.out = nn.Linear(n_state, n_state)
        # Set (torch.bfloat16) to project the audio under CPU autocast in that dtype: the K/V of
        # a 30 s window are a GEMM as large as an encoder layer's, unlike the per-token ones.
        self.autocast_dtype: torch.dtype | None = None

    def project_audio(self, audio: Tensor) -> tuple[Tensor, Tensor]:
        if self.autocast_dtype is None:
            kv = self.kv(audio)
        else:
            with torch.autocast(audio.device.type, dtype=self.autocast_dtype):
                kv = self.kv(audio).to(audio.dtype)
        k, v = kv.chunk(2, dim=-1)
        # contiguous once per window, not copied again by attention at every token
        return split_heads(k, self.n_head).contiguous(), split_heads(v, self.n_head).contiguous()  # (B, H, S, Dh)


def cross_attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, want_qk: bool = False, heads: Sequence[int] = ()
) -> tuple[Tensor, Tensor | None]:
    """Queries (B, H, T, Dh) attending to a window's keys and values (B, H, S, Dh).

    ``mask`` (B, 1, 1, S) bool hides padded audio frames; the returned scores are unmasked. With
    ``want_qk`` also returns every head's scores (B, H, T, S); else with ``heads`` those heads'
    scores (B, len(heads), T, S), what word timings need from a decoding pass.

    Without scores the attention is PyTorch's fused kernel. With them, on a CPU, it is plain
    matmuls whose scores are kept: the keys are read once, where the fused kernel and a second
    product for the heads read them twice (copied first when a batch's rows are separate
    windows): a step of eight batched windows 18 % faster on the AVX2 EPYC. Elsewhere (a GPU, not
    measured) the fused kernel stays.
    """
    scale = q.shape[-1] ** -0.5
    if not want_qk and (not heads or q.device.type != "cpu"):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if not heads:
            return out, None
        # one matmul per run of adjacent heads, on views (selecting heads would copy the keys)
        q = q * scale
        scores = [q[:, a:b] @ k[:, a:b].transpose(-1, -2) for a, b in _runs(heads)]
        return out, (scores[0] if len(scores) == 1 else torch.cat(scores, dim=1)).float()
    qk = (q * scale) @ k.transpose(-1, -2)  # (B, H, T, S)
    scores = qk.float() if mask is None else qk.float().masked_fill(~mask, -torch.inf)
    weights = scores.softmax(dim=-1).to(q.dtype)
    return weights @ v, (qk if want_qk else qk[:, list(heads)]).float()


def _runs(heads: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted head indices as half-open runs of adjacent ones: [0, 1, 2, 5] -> [(0, 3), (5, 6)]."""
    runs: list[tuple[int, int]] = []
    for h in heads:
        if runs and runs[-1][1] == h:
            runs[-1] = (runs[-1][0], h + 1)
        else:
            runs.append((h, h + 1))
    return runs
