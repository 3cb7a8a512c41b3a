"""Tests for the Whisper modules (streamwhisper.model.whisper, kv_cache, loading) and the mel front end.

Numerical equivalence with the reference Whisper on the jfk clip (mel, encoder output, first decoding
step), and the fast paths against the slow ones: cached decoding == uncached logits, batched ==
unbatched. tiny.en comes from the session fixture; base is loaded once for this module.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import REFERENCE

from benchmarks.scoring import Clip, word_error_rate
from streamwhisper.audio.files import load_audio
from streamwhisper.audio.mel import N_FRAMES, N_SAMPLES, log_mel
from streamwhisper.errors import ConfigError
from streamwhisper.model.attention import blocked_attention
from streamwhisper.model.decoding import DecodeOptions, decode
from streamwhisper.model.kv_cache import KVCache
from streamwhisper.model.loading import bfloat16_pays_off, load_model
from streamwhisper.model.tokenizer import get_tokenizer
from streamwhisper.model.whisper import ModelDimensions, Whisper
from streamwhisper.transcribe import Transcriber

pytestmark = pytest.mark.slow  # end to end: the real model

JFK_REFERENCE = (
    "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def models(tiny_model: Whisper, base_model: Whisper) -> dict[str, Whisper]:
    return {"tiny.en": tiny_model, "base": base_model}


@pytest.fixture(scope="module")
def jfk_mel() -> np.ndarray:
    """The reference's 80-band log-mel of jfk padded to 30 s, (80, 3000) float32."""
    return np.load(REFERENCE / "jfk_mel80.npy")


def _clip_mel(clip: Clip) -> np.ndarray:
    return log_mel(load_audio(clip.wav), 80, padding=N_SAMPLES)[:, :N_FRAMES]


@pytest.fixture(scope="module")
def goforward_mel(clips: dict[str, Clip]) -> np.ndarray:
    return _clip_mel(clips["en_ps_goforward"])


def _encode(model: Whisper, mel: np.ndarray) -> torch.Tensor:
    with torch.inference_mode():
        batch = torch.from_numpy(np.ascontiguousarray(mel))
        return model.encoder((batch if batch.ndim == 3 else batch[None]).to(model.dtype))


def _tokenizer(model: Whisper):  # type: ignore[no-untyped-def]
    return get_tokenizer(model.is_multilingual, num_languages=model.num_languages, language="en", task="transcribe")


# ---------------------------------------------------------------- mel


def test_mel80_equals_reference(jfk_audio: np.ndarray, jfk_mel: np.ndarray) -> None:
    mel = log_mel(jfk_audio, 80, padding=N_SAMPLES)[:, :N_FRAMES]
    assert mel.shape == jfk_mel.shape == (80, 3000)
    assert mel.dtype == np.float32
    np.testing.assert_allclose(mel, jfk_mel, atol=1e-4, rtol=0)


def test_mel128_stats_equal_reference(jfk_audio: np.ndarray, reference: dict) -> None:
    stats = reference["jfk"]["mel128_stats"]
    mel = log_mel(jfk_audio, 128, padding=N_SAMPLES)[:, :N_FRAMES]
    assert list(mel.shape) == stats["shape"]
    assert mel.mean() == pytest.approx(stats["mean"], abs=1e-4)
    assert mel.std() == pytest.approx(stats["std"], abs=1e-4)
    np.testing.assert_allclose(mel[:5, 0], stats["first_col_first5"], atol=1e-4)


# ---------------------------------------------------------------- reference values per model


@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_dims_equal_reference(name: str, models: dict[str, Whisper], reference: dict) -> None:
    assert models[name].dims.as_dict() == reference["jfk"][name]["dims"]


@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_encoder_output_equals_reference(
    name: str, models: dict[str, Whisper], jfk_mel: np.ndarray, reference: dict
) -> None:
    ref = reference["jfk"][name]
    features = _encode(models[name], jfk_mel)
    assert features.shape == (1, 1500, ref["dims"]["n_audio_state"])
    assert features.mean().item() == pytest.approx(ref["encoder_out_mean"], abs=1e-4)
    assert features.std().item() == pytest.approx(ref["encoder_out_std"], abs=1e-4)
    np.testing.assert_allclose(features[0, 0, :5].numpy(), ref["encoder_out_0_0_first5"], atol=1e-4)


@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_first_step_top5_equals_reference(
    name: str, models: dict[str, Whisper], jfk_mel: np.ndarray, reference: dict
) -> None:
    ref = reference["jfk"][name]["first_step_top5"]
    model = models[name]
    features = _encode(model, jfk_mel)
    sot_sequence = list(_tokenizer(model).sot_sequence)
    with torch.inference_mode():
        logits, _ = model.decoder(torch.tensor([sot_sequence]), model.new_cache(features))
    values, ids = logits[0, -1].topk(5)
    assert ids.tolist() == ref["ids"]
    np.testing.assert_allclose(values.numpy(), ref["logits"], atol=1e-3)


# ---------------------------------------------------------------- fast paths == slow paths


@pytest.mark.parametrize("name", ["tiny.en", "base"])
def test_cached_decoding_equals_uncached(
    name: str, models: dict[str, Whisper], jfk_mel: np.ndarray, reference: dict
) -> None:
    model = models[name]
    tokenizer = _tokenizer(model)
    features = _encode(model, jfk_mel)
    tokens = [*tokenizer.sot_sequence, *reference["jfk"][name]["greedy_tokens_timestamps_True"], tokenizer.eot]
    with torch.inference_mode():
        one_pass, _ = model.decoder(torch.tensor([tokens]), model.new_cache(features))
        cache = model.new_cache(features)
        steps = torch.cat([model.decoder(torch.tensor([[t]]), cache)[0] for t in tokens], dim=1)
        assert cache.length == len(tokens)
        # a prefix in one pass, the rest token by token (the decode loop's pattern)
        cache = model.new_cache(features)
        head, _ = model.decoder(torch.tensor([tokens[:5]]), cache)
        tail = [model.decoder(torch.tensor([[t]]), cache)[0] for t in tokens[5:]]
        mixed = torch.cat([head, *tail], dim=1)
    assert one_pass.shape == steps.shape == (1, len(tokens), model.dims.n_vocab)
    torch.testing.assert_close(steps, one_pass, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(mixed, one_pass, atol=1e-4, rtol=1e-5)


def test_trimmed_cache_gives_the_same_logits_again(tiny_model: Whisper, jfk_mel: np.ndarray) -> None:
    features = _encode(tiny_model, jfk_mel)
    cache = tiny_model.new_cache(features)
    with torch.inference_mode():
        first, _ = tiny_model.decoder(torch.tensor([[50257, 50363, 843]]), cache)
        cache.trim(2)
        again, _ = tiny_model.decoder(torch.tensor([[843]]), cache)
        cache.trim(1)
        other, _ = tiny_model.decoder(torch.tensor([[50363]]), cache)
    assert cache.length == 2
    torch.testing.assert_close(again, first[:, 2:], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(other, first[:, 1:2], atol=1e-4, rtol=1e-5)


def test_several_tokens_after_cached_ones_equal_one_pass(
    tiny_model: Whisper, jfk_mel: np.ndarray, reference: dict
) -> None:
    # TextDecoder.forward's contract: "tokens (B, T) after cache.length cached ones"
    tokens = [50257, *reference["jfk"]["tiny.en"]["greedy_tokens_timestamps_True"][:8]]
    features = _encode(tiny_model, jfk_mel)
    with torch.inference_mode():
        one_pass, _ = tiny_model.decoder(torch.tensor([tokens]), tiny_model.new_cache(features))
        cache = tiny_model.new_cache(features)
        head, _ = tiny_model.decoder(torch.tensor([tokens[:3]]), cache)
        tail, _ = tiny_model.decoder(torch.tensor([tokens[3:]]), cache)
    torch.testing.assert_close(torch.cat([head, tail], dim=1), one_pass, atol=1e-4, rtol=1e-5)


def test_decoder_select_returns_only_the_selected_positions(tiny_model: Whisper, jfk_mel: np.ndarray) -> None:
    features = _encode(tiny_model, jfk_mel)
    tokens = torch.tensor([[50257, 50363, 843, 523]])
    with torch.inference_mode():
        every, _ = tiny_model.decoder(tokens, tiny_model.new_cache(features))
        picked, _ = tiny_model.decoder(tokens, tiny_model.new_cache(features), select=torch.tensor([0, 3]))
    torch.testing.assert_close(picked, every[:, [0, 3]], atol=1e-5, rtol=1e-5)


def test_batched_encoder_equals_unbatched(tiny_model: Whisper, jfk_mel: np.ndarray, goforward_mel: np.ndarray) -> None:
    batch = _encode(tiny_model, np.stack([jfk_mel, goforward_mel]))
    alone = [_encode(tiny_model, jfk_mel), _encode(tiny_model, goforward_mel)]
    assert batch.shape == (2, 1500, 384)
    assert not torch.allclose(alone[0], alone[1])  # two different inputs
    torch.testing.assert_close(batch[0:1], alone[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(batch[1:2], alone[1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("filled", [0, 7, 440, 1001, 2986])
def test_encoder_skips_the_convolutions_over_padding(tiny_model: Whisper, jfk_mel: np.ndarray, filled: int) -> None:
    """Frames from ``filled`` on hold one value per row (a streamed window's padding): the
    encoder convolves only the frames before them, and gives the same features."""
    mel = torch.from_numpy(np.stack([jfk_mel, jfk_mel[:, ::-1].copy()]))
    mel[0, :, filled:] = -0.3
    mel[1, :, filled // 2 :] = 0.2  # a shorter window in the same batch
    with torch.inference_mode():
        whole, skipped = tiny_model.encoder(mel), tiny_model.encoder(mel, filled)
        stem, short = tiny_model.encoder._stem(mel, None), tiny_model.encoder._stem(mel, filled)
    assert stem.shape == short.shape == (2, 384, 1500)
    torch.testing.assert_close(short, stem, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(skipped, whole, atol=1e-5, rtol=1e-5)


def test_batched_decode_equals_unbatched(tiny_model: Whisper, jfk_mel: np.ndarray, goforward_mel: np.ndarray) -> None:
    tokenizer = _tokenizer(tiny_model)
    features = _encode(tiny_model, np.stack([jfk_mel, goforward_mel]))
    batch = decode(tiny_model, tokenizer, features, DecodeOptions())
    alone = [decode(tiny_model, tokenizer, features[i : i + 1], DecodeOptions())[0] for i in range(2)]
    assert len(batch) == 2
    assert batch[0].tokens != batch[1].tokens
    assert "forward" in batch[1].text.lower()
    for b, a in zip(batch, alone, strict=True):
        assert b.tokens == a.tokens
        assert b.text == a.text
        assert b.avg_logprob == pytest.approx(a.avg_logprob, abs=1e-4)
        assert b.no_speech_prob == pytest.approx(a.no_speech_prob, abs=1e-5)


def test_batched_decode_with_two_detected_languages_equals_unbatched(
    base_model: Whisper, jfk_mel: np.ndarray, clips: dict[str, Clip]
) -> None:
    german = _clip_mel(clips["ml_de_picovoice"])
    tokenizer = get_tokenizer(True, num_languages=base_model.num_languages)
    features = _encode(base_model, np.stack([german, jfk_mel]))
    options = DecodeOptions(without_timestamps=True)
    batch = decode(base_model, tokenizer, features, options)
    alone = [decode(base_model, tokenizer, features[i : i + 1], options)[0] for i in range(2)]
    assert [r.language for r in batch] == ["de", "en"]  # results come back in input order
    for b, a in zip(batch, alone, strict=True):
        assert b.language == a.language
        assert b.tokens == a.tokens
        assert b.avg_logprob == pytest.approx(a.avg_logprob, abs=1e-4)
        assert b.language_probs is not None and a.language_probs is not None
        assert b.language_probs[b.language] == pytest.approx(a.language_probs[a.language], abs=1e-5)


# ---------------------------------------------------------------- KV cache semantics


def _small_cache(batch: int = 2, max_len: int = 4) -> KVCache:
    """One layer, one head, 3 audio frames, d_head 2; row r of the cross keys is filled with r."""
    cross_k = torch.arange(batch, dtype=torch.float32).view(batch, 1, 1, 1).expand(batch, 1, 3, 2).clone()
    return KVCache.create([(cross_k, cross_k + 10)], n_head=1, d_head=2, max_len=max_len)


def _step(cache: KVCache, values: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Write one token per row whose k is ``values[row]`` (v is k + 100), then advance."""
    k = torch.tensor(values).view(-1, 1, 1, 1).expand(-1, 1, 1, 2).clone()
    out = cache.extend_self(0, k, k + 100)
    cache.advance(1)
    return out


def test_kv_cache_create_and_extend() -> None:
    cache = _small_cache()
    assert (cache.batch_size, cache.max_len, cache.length, cache.dtype) == (2, 4, 0, torch.float32)
    k, v = _step(cache, [1.0, 2.0])
    assert k.shape == (2, 1, 1, 2) and cache.length == 1
    k, v = _step(cache, [3.0, 4.0])
    assert k.shape == (2, 1, 2, 2) and cache.length == 2
    assert k[:, 0, :, 0].tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert v[:, 0, :, 0].tolist() == [[101.0, 103.0], [102.0, 104.0]]
    ck, cv = cache.cross(0)
    assert ck[:, 0, 0, 0].tolist() == [0.0, 1.0] and cv[:, 0, 0, 0].tolist() == [10.0, 11.0]


def test_kv_cache_overflow_raises() -> None:
    cache = _small_cache(max_len=2)
    _step(cache, [1.0, 1.0])
    _step(cache, [2.0, 2.0])
    with pytest.raises(ValueError, match="overflow"):
        _step(cache, [3.0, 3.0])


def test_kv_cache_trim_keeps_a_prefix() -> None:
    cache = _small_cache()
    for x in (1.0, 2.0, 3.0):
        _step(cache, [x, x + 0.5])
    cache.trim(1)
    assert cache.length == 1
    k, _ = _step(cache, [7.0, 8.0])  # overwrites position 1
    assert k[:, 0, :, 0].tolist() == [[1.0, 7.0], [1.5, 8.0]]
    with pytest.raises(ValueError):
        cache.trim(3)  # longer than what is cached
    with pytest.raises(ValueError):
        cache.trim(-1)
    cache.trim(0)
    assert cache.length == 0


def test_kv_cache_reorder_moves_self_rows() -> None:
    cache = _small_cache(batch=3)
    _step(cache, [1.0, 2.0, 3.0])
    _step(cache, [4.0, 5.0, 6.0])
    cache.reorder(torch.tensor([2, 0, 0]))  # row i becomes old row rows[i]
    assert cache.length == 2
    k, v = _step(cache, [0.0, 0.0, 0.0])
    assert k[:, 0, :2, 0].tolist() == [[3.0, 6.0], [1.0, 4.0], [1.0, 4.0]]
    assert v[:, 0, :2, 0].tolist() == [[103.0, 106.0], [101.0, 104.0], [101.0, 104.0]]


def test_kv_cache_reorder_swap_does_not_alias() -> None:
    cache = _small_cache()
    _step(cache, [1.0, 2.0])
    cache.reorder(torch.tensor([1, 0]))
    assert cache.self_k[0][:, 0, 0, 0].tolist() == [2.0, 1.0]


def test_kv_cache_repeat_interleaves_rows() -> None:
    cache = _small_cache()
    _step(cache, [1.0, 2.0])
    beams = cache.repeat(3)
    assert beams.batch_size == 6 and beams.length == 1
    assert beams.self_k[0][:, 0, 0, 0].tolist() == [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    assert beams.cross_k[0][:, 0, 0, 0].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert beams.cross_v[0][:, 0, 0, 0].tolist() == [10.0, 10.0, 10.0, 11.0, 11.0, 11.0]
    _step(beams, [9.0] * 6)  # the copy is independent of the original
    assert cache.length == 1
    beams.self_k[0].fill_(-1.0)
    assert cache.self_k[0][:, 0, 0, 0].tolist() == [1.0, 2.0]


def test_kv_cache_repeat_into_less_room_keeps_the_cached_tokens() -> None:
    cache = _small_cache()
    _step(cache, [1.0, 2.0])
    _step(cache, [3.0, 4.0])
    beams = cache.repeat(2, max_len=3)
    assert beams.max_len == 3 and beams.length == 2
    assert beams.self_k[0][:, 0, :2, 0].tolist() == [[1.0, 3.0], [1.0, 3.0], [2.0, 4.0], [2.0, 4.0]]
    k, _ = _step(beams, [5.0, 6.0, 7.0, 8.0])
    assert k[:, 0, :, 0].tolist() == [[1.0, 3.0, 5.0], [1.0, 3.0, 6.0], [2.0, 4.0, 7.0], [2.0, 4.0, 8.0]]
    with pytest.raises(ValueError, match="overflow"):
        _step(beams, [0.0] * 4)
    with pytest.raises(ValueError, match="room"):
        cache.repeat(2, max_len=1)


def test_kv_cache_repeat_of_one_window_shares_its_cross_keys() -> None:
    cache = _small_cache(batch=1)
    _step(cache, [1.0])
    beams = cache.repeat(4)
    assert beams.shares_cross and not cache.shares_cross
    assert beams.cross_k[0].data_ptr() == cache.cross_k[0].data_ptr()  # expanded, not copied
    assert beams.cross_v[0][:, 0, 0, 0].tolist() == [10.0] * 4
    _step(beams, [5.0, 6.0, 7.0, 8.0])  # self K/V are each beam's own
    assert beams.self_k[0][:, 0, 1, 0].tolist() == [5.0, 6.0, 7.0, 8.0]
    assert not _small_cache(batch=2).repeat(2).shares_cross


def test_beams_sharing_one_window_decode_as_copies_would(tiny_model) -> None:
    """The folded cross-attention of one window's beams equals attending row by row."""
    torch.manual_seed(0)
    with torch.inference_mode():
        features = tiny_model.encoder(torch.randn(1, 80, 3000))
        tokens = torch.randint(0, 50000, (3, 4))
        shared = tiny_model.new_cache(features).repeat(3)
        copied = tiny_model.new_cache(features.repeat(3, 1, 1))
        assert shared.shares_cross and not copied.shares_cross
        a, _ = tiny_model.decoder(tokens, shared)
        b, _ = tiny_model.decoder(tokens, copied)
    assert torch.allclose(a, b, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("n", [300, 500, 1500])
def testblocked_attention_equals_sdpa(n: int) -> None:
    torch.manual_seed(n)
    q, k, v = (torch.randn(2, 6, n, 64) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(blocked_attention(q, k, v), ref, atol=1e-5)
    # bfloat16, as the encoder runs it under autocast: within bfloat16's rounding
    got = blocked_attention(q.bfloat16(), k.bfloat16(), v.bfloat16()).float()
    assert (got - ref).abs().max() < 0.02


def test_kv_cache_select_keeps_given_rows() -> None:
    cache = _small_cache(batch=3)
    _step(cache, [1.0, 2.0, 3.0])
    picked = cache.select(torch.tensor([2, 0]))
    assert picked.batch_size == 2 and picked.length == 1
    assert picked.self_k[0][:, 0, 0, 0].tolist() == [3.0, 1.0]
    assert picked.self_v[0][:, 0, 0, 0].tolist() == [103.0, 101.0]
    assert picked.cross_k[0][:, 0, 0, 0].tolist() == [2.0, 0.0]
    k, _ = _step(picked, [7.0, 8.0])
    assert k[:, 0, :, 0].tolist() == [[3.0, 7.0], [1.0, 8.0]]
    assert cache.self_k[0][:, 0, 0, 0].tolist() == [1.0, 2.0, 3.0]  # the original is untouched


# ---------------------------------------------------------------- shapes and dimensions


def test_shorter_audio_context(tiny_model: Whisper, jfk_mel: np.ndarray) -> None:
    features = _encode(tiny_model, jfk_mel[:, :1000])
    assert features.shape == (1, 500, tiny_model.dims.n_audio_state)
    assert torch.isfinite(features).all()


def test_shorter_audio_context_decodes_the_clip(tiny_model: Whisper, jfk_audio: np.ndarray) -> None:
    # 11 s of speech in a 12 s context (what serving's audio_ctx="fit" does)
    mel = log_mel(jfk_audio, 80, padding=N_SAMPLES)[:, :1200]
    features = _encode(tiny_model, mel)
    assert features.shape == (1, 600, 384)
    result = decode(tiny_model, _tokenizer(tiny_model), features, DecodeOptions(without_timestamps=True))[0]
    assert word_error_rate([JFK_REFERENCE], [result.text]) <= 0.1


def test_audio_context_longer_than_the_model_raises(tiny_model: Whisper) -> None:
    with pytest.raises(ValueError, match="exceeds"):
        _encode(tiny_model, np.zeros((80, N_FRAMES + 4), dtype=np.float32))


@pytest.mark.parametrize(
    ("n_vocab", "multilingual", "languages"),
    [(51864, False, 99), (51865, True, 99), (51866, True, 100)],
    ids=["english-only", "multilingual", "large-v3"],
)
def test_model_dimensions_languages(n_vocab: int, multilingual: bool, languages: int) -> None:
    dims = ModelDimensions(80, 1500, 384, 6, 4, n_vocab, 448, 384, 6, 4)
    assert dims.is_multilingual is multilingual
    assert dims.num_languages == languages


def test_loaded_models_languages(tiny_model: Whisper, base_model: Whisper) -> None:
    assert (tiny_model.is_multilingual, tiny_model.num_languages) == (False, 99)
    assert (base_model.is_multilingual, base_model.num_languages) == (True, 99)
    assert tiny_model.dims.is_multilingual is False and base_model.dims.is_multilingual is True


def test_default_alignment_heads_are_the_upper_half() -> None:
    model = Whisper(ModelDimensions(80, 16, 64, 2, 2, 120, 12, 64, 2, 4))
    assert model.alignment_heads.tolist() == [[False, False], [False, False], [True, True], [True, True]]
    model.set_alignment_heads([(0, 1), (3, 0)])
    assert model.alignment_heads.nonzero().tolist() == [[0, 1], [3, 0]]


# ---------------------------------------------------------------- compute types

# torch.ao.quantization warns that it is deprecated at every quantize_dynamic call. load_model quiets it
# (model/int8.py's deprecation_quieted); this mark keeps a test green should one escape.
IGNORE_QUANT_DEPRECATION = pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning")


def test_float16_needs_cuda() -> None:
    with pytest.raises(ConfigError, match="float16 needs CUDA"):
        load_model("tiny.en", compute_type="float16")


def test_unknown_compute_type_raises() -> None:
    with pytest.raises(ConfigError, match="unknown compute type"):
        load_model("tiny.en", compute_type="int4")


def test_bfloat16_runs_on_cpu_close_to_float32(tiny_model: Whisper, jfk_mel: np.ndarray, jfk_audio: np.ndarray) -> None:
    model = load_model("tiny.en", compute_type="bfloat16")
    assert model.dtype == torch.bfloat16
    features = _encode(model, jfk_mel)
    reference = _encode(tiny_model, jfk_mel)
    assert features.dtype == torch.bfloat16
    error = (features.float() - reference).norm() / reference.norm()
    assert error < 0.05
    assert torch.nn.functional.cosine_similarity(features.float().flatten(), reference.flatten(), dim=0) > 0.999
    result = Transcriber(model).transcribe(jfk_audio)
    assert word_error_rate([JFK_REFERENCE], [result.text]) <= 0.1


def test_default_compute_type_loads_with_warnings_as_errors() -> None:
    model = load_model("tiny.en")
    assert model.decoder.logits is not None


@pytest.mark.parametrize("bf16", [False, True], ids=["float32-encoder", "bfloat16-encoder"])
def test_mixed_compute_type_keeps_fp16_decoder_weights_and_an_exact_enough_encoder(
    tiny_model: Whisper, jfk_mel: np.ndarray, jfk_audio: np.ndarray, monkeypatch: pytest.MonkeyPatch, bf16: bool
) -> None:
    """Both encoder paths on every CPU: the one the load-time GEMM timing picks here, and the other
    one forced (torch runs bfloat16 on CPUs without bfloat16 instructions too, only slower)."""
    import streamwhisper.model.loading as loading

    monkeypatch.setattr(loading, "bfloat16_pays_off", lambda: bf16)
    model = load_model("tiny.en", compute_type="mixed")
    assert model.decoder.logits is not None  # the int8 output projection
    fc1 = model.decoder.blocks[0].mlp[0]
    assert fc1.weight_dtype == torch.float16  # decoder weights stored as float16
    kv = model.decoder.blocks[0].cross_attn.kv  # the window's K/V: one large GEMM, float32 is faster
    assert type(kv) is torch.nn.Linear and kv.weight.dtype == torch.float32
    features = _encode(model, jfk_mel)
    reference = _encode(tiny_model, jfk_mel)
    assert features.dtype == torch.float32
    if bf16:
        assert model.encoder.autocast_dtype == torch.bfloat16
        assert not torch.equal(features, reference)
    else:
        assert model.encoder.autocast_dtype is None
    assert torch.nn.functional.cosine_similarity(features.flatten(), reference.flatten(), dim=0) > 0.999
    result = Transcriber(model).transcribe(jfk_audio)
    assert word_error_rate([JFK_REFERENCE], [result.text]) <= 0.1


@pytest.mark.parametrize("flags", [False, True])
def test_bfloat16_is_used_only_where_it_is_faster(monkeypatch: pytest.MonkeyPatch, flags: bool) -> None:
    """A CPU without bfloat16 instructions never measures; one with them uses bfloat16 only
    when its GEMMs beat float32 (an Intel Xeon here reports AVX-512 BF16 and runs them at half
    speed)."""
    import streamwhisper.model.loading as loading

    timed: list[torch.dtype] = []
    real_randn = torch.randn

    def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        timed.append(dtype)
        return real_randn(*shape, dtype=dtype)

    monkeypatch.setattr(loading, "cpu_has", lambda *names: flags)
    monkeypatch.setattr(loading.torch, "randn", randn)
    bfloat16_pays_off.cache_clear()
    try:
        chosen = bfloat16_pays_off()
        assert bfloat16_pays_off() is chosen and len(timed) == (4 if flags else 0)  # measured once
        assert chosen is False or flags
        monkeypatch.setattr(loading.torch, "randn", real_randn)
        model = load_model("tiny.en", compute_type="mixed")
        assert (model.encoder.autocast_dtype == torch.bfloat16) is chosen
    finally:
        bfloat16_pays_off.cache_clear()


@IGNORE_QUANT_DEPRECATION
@pytest.mark.parametrize("compute_type", ["int8", "int8_logits"])
def test_int8_compute_types_transcribe_jfk(
    compute_type: str, tiny_model: Whisper, jfk_mel: np.ndarray, jfk_audio: np.ndarray
) -> None:
    model = load_model("tiny.en", compute_type=compute_type)
    assert model.decoder.logits is not None  # the int8 output projection
    features = _encode(model, jfk_mel)
    reference = _encode(tiny_model, jfk_mel)
    if compute_type == "int8_logits":
        torch.testing.assert_close(features, reference, atol=1e-5, rtol=1e-5)  # only the logits are int8
    else:
        assert not torch.equal(features, reference)  # the encoder is quantised too
        assert torch.nn.functional.cosine_similarity(features.flatten(), reference.flatten(), dim=0) > 0.95
    result = Transcriber(model).transcribe(jfk_audio)
    assert word_error_rate([JFK_REFERENCE], [result.text]) <= 0.1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (no GPU on this machine)")
def test_cuda_default_compute_type_transcribes_jfk(jfk_audio: np.ndarray) -> None:
    model = load_model("tiny.en", device="cuda")  # float16 by default on CUDA
    assert next(model.parameters()).is_cuda and model.dtype == torch.float16
    result = Transcriber(model).transcribe(jfk_audio)
    assert word_error_rate([JFK_REFERENCE], [result.text]) <= 0.1
