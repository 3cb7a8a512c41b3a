"""Whisper as plain nn.Modules: dimensions, residual blocks, audio encoder, text decoder.

The attention layers they are built of are in :mod:`~streamwhisper.model.attention`.

The modules know nothing about decoding, streaming or sockets. Self-attention projections are fused
(one q/k/v matrix, as CTranslate2 stores them) and cross-attention keys/values are fused too; both
loaders map their checkpoints onto this layout. The decoder's memory of past tokens lives in an
explicit :class:`~streamwhisper.model.kv_cache.KVCache` passed in by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import CrossAttention, SelfAttention
from .decoder_layer import LayerKernels, decoder_layer
from .interrupt import checkpoint
from .kv_cache import KVCache


@dataclass(frozen=True)
class ModelDimensions:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def is_multilingual(self) -> bool:
        return self.n_vocab >= 51865

    @property
    def num_languages(self) -> int:
        return self.n_vocab - 51765 - int(self.is_multilingual)


def sinusoids(length: int, channels: int, max_timescale: float = 10_000.0) -> Tensor:
    """Whisper's fixed sinusoidal encoder positions, shape (length, channels), on the default device.

    Computed on the CPU even when the model is built on the meta device (``weights.build_model``):
    there ``exp`` and ``sin`` run PyTorch's Python meta kernels, whose first use imports
    torch._dynamo (seconds of loading and about 70 MB resident, for a buffer the checkpoint replaces).
    """
    assert channels % 2 == 0
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2, device="cpu"))
    scaled_time = torch.arange(length, device="cpu")[:, None] * inv_timescales[None, :]
    table = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)
    return table.to(torch.get_default_device())


class LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 whatever the activations' dtype (fp16 safety)."""

    def forward(self, x: Tensor) -> Tensor:
        weight: Tensor | None = self.weight  # (each nn.Module attribute is a lookup of ~1 us)
        bias: Tensor | None = self.bias
        if x.dtype == torch.float32 and weight is not None and weight.dtype == torch.float32:
            return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)
        weight = None if weight is None else weight.float()
        bias = None if bias is None else bias.float()
        return F.layer_norm(x.float(), self.normalized_shape, weight, bias, self.eps).type(x.dtype)


class MLP(nn.Sequential):
    def __init__(self, n_state: int) -> None:
        super().__init__(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))


class EncoderBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.attn = SelfAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.mlp = MLP(n_state)
        self.mlp_ln = LayerNorm(n_state)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.attn_ln(x))
        return x + self.mlp(self.mlp_ln(x))


class DecoderBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.attn = SelfAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.cross_attn = CrossAttention(n_state, n_head)
        self.cross_attn_ln = LayerNorm(n_state)
        self.mlp = MLP(n_state)
        self.mlp_ln = LayerNorm(n_state)

    def forward(
        self, x: Tensor, cache: KVCache, layer: int, mask: Tensor | None, want_qk: bool, heads: Sequence[int] = ()
    ) -> tuple[Tensor, Tensor | None]:
        """:func:`~.decoder_layer.decoder_layer` over this block's kernels."""
        return decoder_layer(LayerKernels.of(self), x, cache, layer, mask, want_qk, heads)


class AudioEncoder(nn.Module):
    def __init__(self, n_mels: int, n_ctx: int, n_state: int, n_head: int, n_layer: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(n_ctx, n_state))
        self.blocks = nn.ModuleList([EncoderBlock(n_state, n_head) for _ in range(n_layer)])
        self.ln_post = LayerNorm(n_state)
        # Set (torch.bfloat16) to run convolutions, projections and attention in that dtype
        # under CPU autocast while the residual stream and LayerNorms stay float32.
        self.autocast_dtype: torch.dtype | None = None

    def forward(self, mel: Tensor, filled: int | None = None) -> Tensor:
        """mel (B, n_mels, n_frames) -> audio features (B, n_frames // 2, n_state).

        n_frames may be below 3000 (a shorter audio context); positions are taken from the start.
        ``filled``: every frame from this one on holds one value (a short window's padding), so
        the convolutions need only run over the frames before it (see :meth:`_stem`).
        """
        if self.autocast_dtype is None:
            return self._forward(mel, filled)
        with torch.autocast(mel.device.type, dtype=self.autocast_dtype):
            return self._forward(mel, filled).to(mel.dtype)

    def _convolve(self, mel: Tensor) -> Tensor:
        return F.gelu(self.conv2(F.gelu(self.conv1(mel))))

    def _stem(self, mel: Tensor, filled: int | None) -> Tensor:
        """The convolutions, (B, n_mels, n) -> (B, n_state, n // 2).

        Over a constant stretch of frames they give one vector, the same at each position but
        next to its ends: run over the filled frames (and a margin), then over the last 8 frames
        (which give that vector and the last position's), rather than over all of a streamed
        window's 30 s (for 5 s of audio, 8 ms a request less on two cores).
        """
        n = mel.shape[-1]
        if filled is None or n % 2 or filled + 6 + 8 > n:
            return self._convolve(mel)
        head = filled + 6 + filled % 2  # even; positions before head // 2 - 1 see no padding edge
        start = self._convolve(mel[..., :head])[..., : head // 2 - 1]
        end = self._convolve(mel[..., n - 8 :])  # 4 positions: [1] and [2] inner, [3] the last
        inner = end[..., 1:2].expand(-1, -1, n // 2 - head // 2)
        return torch.cat([start, inner, end[..., 3:]], dim=-1)

    def _forward(self, mel: Tensor, filled: int | None = None) -> Tensor:
        x = self._stem(mel, filled).permute(0, 2, 1)  # (B, S, n_state)
        pos: Tensor = self.positional_embedding  # type: ignore[assignment]
        if x.shape[1] > pos.shape[0]:
            raise ValueError(f"audio context {x.shape[1]} exceeds the model's {pos.shape[0]}")
        x = x + pos[: x.shape[1]].to(x.dtype)
        for block in self.blocks:
            checkpoint()
            x = block(x)
        return self.ln_post(x)


class TextDecoder(nn.Module):
    def __init__(self, n_vocab: int, n_ctx: int, n_state: int, n_head: int, n_layer: int) -> None:
        super().__init__()
        self.n_head = n_head
        # nn.Embedding's own initialisation, but not on the meta device (see sinusoids)
        self.token_embedding = nn.Embedding(n_vocab, n_state, _weight=torch.empty(n_vocab, n_state))
        if not self.token_embedding.weight.is_meta:
            nn.init.normal_(self.token_embedding.weight)
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state))
        self.blocks = nn.ModuleList([DecoderBlock(n_state, n_head) for _ in range(n_layer)])
        self.ln = LayerNorm(n_state)
        # Logits come from the token embedding (tied); a separate module so that it can be quantised.
        self.logits: nn.Module | None = None

    def forward(
        self,
        tokens: Tensor,
        cache: KVCache,
        *,
        positions: Tensor | None = None,
        mask: Tensor | None = None,
        want_qk: bool = False,
        select: Tensor | None = None,
        row_logits: bool = False,
        heads: Mapping[int, Sequence[int]] | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """tokens (B, T) after ``cache.length`` cached ones -> logits (B, T or 1, n_vocab) in float32.

        ``positions`` (B, T) overrides the default positions cache.length .. cache.length + T - 1
        (left-padded batches); ``mask`` is an additive or boolean attention mask broadcastable to
        (B, H, T, past + T); ``select`` picks the positions whose logits are wanted (all by
        default). With ``want_qk`` also returns each layer's cross-attention scores; with
        ``heads`` ({layer: heads}) those heads' scores (B, heads, T, S), one tensor per layer.
        ``row_logits``: quantised logits one row at a time. Dynamic int8 quantisation scales the
        activations of each call as a whole, so a row batched with others would round (and
        sometimes decode) differently than alone.
        """
        offset = cache.length
        if positions is None:
            pos_emb = self.positional_embedding[offset : offset + tokens.shape[-1]]
        else:
            pos_emb = self.positional_embedding[positions]
        x = self.token_embedding(tokens) + pos_emb
        x = x.to(cache.dtype)
        qks: list[Tensor] = []
        for i, block in enumerate(self.blocks):
            x, qk = decoder_layer(LayerKernels.of(block), x, cache, i, mask, want_qk, heads.get(i, ()) if heads else ())
            if qk is not None:
                qks.append(qk)
        cache.advance(tokens.shape[-1])
        if select is not None:
            x = x[:, select]
        x = self.ln(x)
        if self.logits is not None:
            if row_logits:
                logits = torch.cat([self.logits(row) for row in x.float().split(1)])
            else:
                logits = self.logits(x.float())
        else:
            logits = x @ self.token_embedding.weight.to(x.dtype).T
        return logits.float(), qks

    def cross_attention_scores(self, tokens: Tensor, cache: KVCache, layers: Collection[int]) -> dict[int, Tensor]:
        """Cross-attention scores (B, H, T, S) of ``layers`` for ``tokens`` after the cached ones.

        Runs the blocks up to the last of ``layers`` only, and no logits: what word alignment
        needs once the tokens' probabilities are known (from decoding them).
        """
        offset = cache.length
        x = self.token_embedding(tokens) + self.positional_embedding[offset : offset + tokens.shape[-1]]
        x = x.to(cache.dtype)
        scores: dict[int, Tensor] = {}
        for i, block in enumerate(self.blocks[: max(layers) + 1]):
            x, qk = block(x, cache, i, None, i in layers)
            if qk is not None:
                scores[i] = qk
        cache.advance(tokens.shape[-1])
        return scores


class Whisper(nn.Module):
    """The whole model. ``alignment_heads`` is a (n_text_layer, n_text_head) bool buffer."""

    def __init__(self, dims: ModelDimensions) -> None:
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(
            dims.n_mels, dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_head, dims.n_audio_layer
        )
        self.decoder = TextDecoder(
            dims.n_vocab, dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer
        )
        # Whisper's default: the upper half of the decoder's heads align with the audio.
        heads = torch.zeros(dims.n_text_layer, dims.n_text_head, dtype=torch.bool)
        heads[dims.n_text_layer // 2 :] = True
        self.register_buffer("alignment_heads", heads, persistent=False)

    def set_alignment_heads(self, pairs: list[tuple[int, int]]) -> None:
        heads = torch.zeros(self.dims.n_text_layer, self.dims.n_text_head, dtype=torch.bool)
        for layer, head in pairs:
            heads[layer, head] = True
        self.register_buffer("alignment_heads", heads, persistent=False)

    @property
    def device(self) -> torch.device:
        return self.decoder.positional_embedding.device

    @property
    def dtype(self) -> torch.dtype:
        return self.encoder.conv1.weight.dtype

    @property
    def is_multilingual(self) -> bool:
        return self.dims.is_multilingual

    @property
    def num_languages(self) -> int:
        return self.dims.num_languages

    def new_cache(self, audio_features: Tensor, max_tokens: int | None = None) -> KVCache:
        """A KV cache for decoding over ``audio_features`` (B, S, n_state), cross K/V computed once."""
        cross = [cast(DecoderBlock, block).cross_attn.project_audio(audio_features) for block in self.decoder.blocks]
        return KVCache.create(
            cross,
            n_head=self.dims.n_text_head,
            d_head=self.dims.n_text_state // self.dims.n_text_head,
            max_len=max_tokens or self.dims.n_text_ctx,
        )
