"""Tests for streamwhisper.model.decoder_layer and the attention functions it calls, on a small
random model: the decoder block as plain calls over its modules' forward methods."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from streamwhisper.model.attention import cross_attend, split_heads, split_qkv
from streamwhisper.model.whisper import ModelDimensions, Whisper

DIMS = ModelDimensions(
    n_mels=80, n_audio_ctx=20, n_audio_state=32, n_audio_head=4, n_audio_layer=2,
    n_vocab=300, n_text_ctx=32, n_text_state=32, n_text_head=4, n_text_layer=2,
)  # fmt: skip


@pytest.fixture
def model() -> Whisper:
    torch.manual_seed(0)
    model = Whisper(DIMS).eval()
    with torch.no_grad():
        model.decoder.positional_embedding.normal_(std=0.1)  # (left uninitialised by the module)
    return model


@pytest.fixture
def features(model: Whisper) -> torch.Tensor:
    torch.manual_seed(1)
    with torch.inference_mode():
        return model.encoder(torch.randn(1, DIMS.n_mels, 2 * DIMS.n_audio_ctx))


def test_split_qkv_gives_the_views_split_heads_gives_each_chunk() -> None:
    fused = torch.randn(3, 5, 3 * 32)
    for got, chunk in zip(split_qkv(fused, 4), fused.chunk(3, dim=-1), strict=True):
        want = split_heads(chunk, 4)
        assert torch.equal(got, want)
        assert got.stride() == want.stride() and got.data_ptr() == want.data_ptr()


def test_tokens_one_at_a_time_equal_one_pass(model: Whisper, features: torch.Tensor) -> None:
    tokens = torch.tensor([[1, 7, 42, 99, 5, 250, 3]])
    with torch.inference_mode():
        whole, _ = model.decoder(tokens, model.new_cache(features))
        cache = model.new_cache(features)
        head, _ = model.decoder(tokens[:, :3], cache)  # a prompt, then the causal mask over the cache
        steps = [model.decoder(tokens[:, i : i + 1], cache)[0] for i in range(3, tokens.shape[1])]
    torch.testing.assert_close(torch.cat([head, *steps], dim=1), whole, atol=1e-5, rtol=1e-5)


def test_beams_sharing_one_window_decode_as_copies_would(model: Whisper, features: torch.Tensor) -> None:
    tokens = torch.tensor([[1, 7, 42], [1, 8, 43], [1, 9, 44]])
    heads = {1: [0, 2, 3]}
    with torch.inference_mode():
        shared = model.new_cache(features).repeat(3)
        copied = model.new_cache(features.repeat(3, 1, 1))
        assert shared.shares_cross and not copied.shares_cross
        a, qa = model.decoder(tokens, shared, heads=heads)
        b, qb = model.decoder(tokens, copied, heads=heads)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(qa[0], qb[0], atol=1e-5, rtol=1e-5)
    assert qa[0].shape == (3, 3, 3, features.shape[1])


def test_a_module_replaced_after_a_pass_is_the_one_the_next_pass_uses(model: Whisper, features: torch.Tensor) -> None:
    """The blocks' forward methods are gathered each pass, never kept from an earlier one."""
    tokens = torch.tensor([[1, 7, 42]])
    zero = nn.Linear(4 * DIMS.n_text_state, DIMS.n_text_state)
    nn.init.zeros_(zero.weight)
    nn.init.zeros_(zero.bias)
    with torch.inference_mode():
        before, _ = model.decoder(tokens, model.new_cache(features))
        model.decoder.blocks[1].mlp[2] = zero  # type: ignore[index]
        after, _ = model.decoder(tokens, model.new_cache(features))
        fresh = Whisper(DIMS).eval()
        fresh.load_state_dict(model.state_dict())
        want, _ = fresh.decoder(tokens, fresh.new_cache(features))
    assert not torch.allclose(after, before, atol=1e-3)
    torch.testing.assert_close(after, want, atol=0, rtol=0)


def test_cross_attention_that_keeps_heads_scores_attends_as_the_fused_kernel() -> None:
    """With alignment heads the attention is plain matmuls (the keys read once): the same
    attention as the fused kernel's, padded frames hidden, and those heads' unmasked scores."""
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 8)
    mask = torch.ones(2, 1, 1, 10, dtype=torch.bool)
    mask[1, ..., 6:] = False  # the second window is shorter: its last four frames are padding
    fused, none = cross_attend(q, k, v, mask)
    attended, scores = cross_attend(q, k, v, mask, heads=(0, 2, 3))
    _, every = cross_attend(q, k, v, mask, want_qk=True)
    assert none is None and scores is not None and every is not None
    torch.testing.assert_close(attended, fused, atol=1e-6, rtol=1e-5)
    assert torch.equal(scores, every[:, [0, 2, 3]])
    torch.testing.assert_close(scores, (q[:, [0, 2, 3]] @ k[:, [0, 2, 3]].transpose(-1, -2)) / 8**0.5)
