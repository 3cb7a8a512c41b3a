"""Tests for streamwhisper.model.decoding: equality with the reference Whisper, options, logit filters.

The reference values (whisper_reference.json) were computed by openai-whisper on jfk_mel80.npy; our
decode() on the same mel must give the same tokens and scores. The logit filters are checked on
hand-made logits with the real English tokenizer.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import REFERENCE

from benchmarks.scoring import Clip, normalize, word_error_rate
from streamwhisper.audio.files import load_audio
from streamwhisper.errors import ConfigError
from streamwhisper.model.decoding import DecodeOptions, compression_ratio, decode, initial_tokens, with_temperature
from streamwhisper.model.fallback import FallbackRule
from streamwhisper.model.logit_filters import ApplyTimestampRules, SuppressBlank, SuppressTokens, suppress_token_ids
from streamwhisper.model.token_decoders import GreedyDecoder, rank_by_likelihood, row_argmax, row_topk
from streamwhisper.model.tokenizer import Tokenizer, get_tokenizer
from streamwhisper.model.whisper import Whisper
from streamwhisper.transcribe import TranscribeOptions, Transcriber

pytestmark = pytest.mark.slow  # end to end: the real model

JFK_REFERENCE = (
    "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
)
DETECT_CLIPS = ["ml_de_picovoice", "ml_es_picovoice", "ml_ja_picovoice", "ml_it_picovoice"]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def jfk_mel() -> torch.Tensor:
    return torch.from_numpy(np.load(REFERENCE / "jfk_mel80.npy"))[None]  # (1, 80, 3000)


@pytest.fixture(scope="module")
def tiny_features(tiny_model: Whisper, jfk_mel: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return tiny_model.encoder(jfk_mel)


@pytest.fixture(scope="module")
def base_features(base_model: Whisper, jfk_mel: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return base_model.encoder(jfk_mel)


@pytest.fixture(scope="module")
def english() -> Tokenizer:
    return get_tokenizer(False)


@pytest.fixture(scope="module")
def multilingual() -> Tokenizer:
    return get_tokenizer(True, num_languages=99)


def _clip(clips: dict[str, Clip], clip_id: str) -> np.ndarray:
    return load_audio(clips[clip_id].wav)


# ---------------------------------------------------------------- reference equality: tiny.en


@pytest.mark.parametrize("beam_size", [None, 5], ids=["greedy", "beam"])
def test_token_logprobs_are_the_model_s_for_the_chosen_tokens(
    tiny_model: Whisper, english: Tokenizer, tiny_features: torch.Tensor, beam_size: int | None
) -> None:
    options = DecodeOptions(without_timestamps=True, beam_size=beam_size)
    result = decode(tiny_model, english, tiny_features, options)[0]
    assert len(result.token_logprobs) == len(result.tokens) > 10
    start = initial_tokens(english, options, tiny_model.dims.n_text_ctx, 224)
    sequence = [*start, *result.tokens]
    with torch.inference_mode():
        logits, _ = tiny_model.decoder(torch.tensor([sequence]), tiny_model.new_cache(tiny_features))
    # the decoder's own log-probs of each chosen token, after the same suppression
    logits = logits[0, len(start) - 1 : -1].float().clone()
    logits[:, suppress_token_ids(english, options.suppress_tokens)] = -torch.inf
    logits[0, english.encode(" ") + [english.eot]] = -torch.inf  # SuppressBlank
    logprobs = torch.log_softmax(logits, dim=-1)
    forced = logprobs[torch.arange(len(result.tokens)), torch.tensor(result.tokens)].tolist()
    assert result.token_logprobs == pytest.approx(forced, abs=1e-3)
    # avg_logprob also counts the end-of-text token, whose log-prob is <= 0
    assert sum(result.token_logprobs) >= result.avg_logprob * (len(result.tokens) + 1) - 1e-4


@pytest.mark.parametrize("beam_size", [None, 5], ids=["greedy", "beam"])
def test_alignment_scores_are_the_chosen_tokens_own(
    tiny_model: Whisper, english: Tokenizer, tiny_features: torch.Tensor, beam_size: int | None
) -> None:
    """The scores kept while decoding (the chosen beam's, step by step) equal those of one pass
    over the prompt, sot sequence, prefix and chosen tokens."""
    options = DecodeOptions(
        without_timestamps=True, beam_size=beam_size, prompt=" Ladies and gentlemen.", prefix=" And so",
        alignment_scores=True,
    )
    result = decode(tiny_model, english, tiny_features, options)[0]
    assert result.alignment_scores is not None and len(result.tokens) > 10
    start = initial_tokens(english, options, tiny_model.dims.n_text_ctx, 224)
    sequence = [*start, *result.tokens]
    with torch.inference_mode():
        _, qks = tiny_model.decoder(torch.tensor([sequence]), tiny_model.new_cache(tiny_features), want_qk=True)
    heads = tiny_model.alignment_heads.nonzero().tolist()
    expected = torch.stack([qks[layer][0, head] for layer, head in heads])[:, start.index(english.sot) :]
    assert result.alignment_scores.shape == expected.shape  # sot .. the last text token
    torch.testing.assert_close(result.alignment_scores, expected, atol=2e-3, rtol=1e-3)
    # cut at sample_len, the last token was never fed back: no scores
    cut = decode(tiny_model, english, tiny_features, replace(options, sample_len=3))[0]
    assert len(cut.tokens) == 3 and cut.alignment_scores is None


@pytest.mark.parametrize("timestamps", [False, True], ids=["text", "timestamps"])
def test_tiny_greedy_equals_reference(
    tiny_model: Whisper, english: Tokenizer, tiny_features: torch.Tensor, reference: dict, timestamps: bool
) -> None:
    ref = reference["jfk"]["tiny.en"]
    result = decode(tiny_model, english, tiny_features, DecodeOptions(without_timestamps=not timestamps))[0]
    assert result.tokens == ref[f"greedy_tokens_timestamps_{timestamps}"]
    assert result.text == ref[f"greedy_text_timestamps_{timestamps}"]
    assert result.avg_logprob == pytest.approx(ref[f"avg_logprob_timestamps_{timestamps}"], abs=1e-4)
    assert result.no_speech_prob == pytest.approx(ref[f"no_speech_prob_timestamps_{timestamps}"], abs=1e-4)
    assert result.language == "en" and result.language_probs is None  # English-only: no detection
    assert result.temperature == 0.0
    assert result.compression_ratio == pytest.approx(compression_ratio(result.text))


def test_tiny_beam5_equals_reference(
    tiny_model: Whisper, english: Tokenizer, tiny_features: torch.Tensor, reference: dict
) -> None:
    ref = reference["jfk"]["tiny.en"]
    result = decode(tiny_model, english, tiny_features, DecodeOptions(beam_size=5, without_timestamps=True))[0]
    assert result.tokens == ref["beam5_tokens"]
    assert result.text == ref["beam5_text"]


# ---------------------------------------------------------------- reference equality: base


def test_base_greedy_with_timestamps_and_language_equal_reference(
    base_model: Whisper, multilingual: Tokenizer, base_features: torch.Tensor, reference: dict
) -> None:
    ref = reference["jfk"]["base"]
    result = decode(base_model, multilingual, base_features, DecodeOptions())[0]  # language detected
    assert result.language == "en"
    assert result.tokens == ref["greedy_tokens_timestamps_True"]
    assert result.text == ref["greedy_text_timestamps_True"]
    assert result.avg_logprob == pytest.approx(ref["avg_logprob_timestamps_True"], abs=1e-4)
    assert result.no_speech_prob == pytest.approx(ref["no_speech_prob_timestamps_True"], abs=1e-4)
    assert result.language_probs is not None
    assert sum(result.language_probs.values()) == pytest.approx(1.0, abs=1e-4)
    top3 = sorted(result.language_probs.items(), key=lambda kv: -kv[1])[:3]
    assert [code for code, _ in top3] == [code for code, _ in ref["detect_language_jfk_top3"]]
    np.testing.assert_allclose([p for _, p in top3], [p for _, p in ref["detect_language_jfk_top3"]], atol=1e-3)


def test_base_greedy_without_timestamps_equals_reference(
    base_model: Whisper, multilingual: Tokenizer, base_features: torch.Tensor, reference: dict
) -> None:
    ref = reference["jfk"]["base"]
    result = decode(base_model, multilingual, base_features, DecodeOptions(language="en", without_timestamps=True))[0]
    assert result.tokens == ref["greedy_tokens_timestamps_False"]
    assert result.avg_logprob == pytest.approx(ref["avg_logprob_timestamps_False"], abs=1e-4)
    assert result.language_probs is None  # language given: no detection


def test_base_beam5_equals_reference(
    base_model: Whisper, multilingual: Tokenizer, base_features: torch.Tensor, reference: dict
) -> None:
    ref = reference["jfk"]["base"]
    result = decode(
        base_model, multilingual, base_features, DecodeOptions(language="en", beam_size=5, without_timestamps=True)
    )[0]
    assert result.tokens == ref["beam5_tokens"]
    assert result.text == ref["beam5_text"]


@pytest.mark.parametrize("clip_id", DETECT_CLIPS)
def test_base_detect_language_equals_reference(
    base_model: Whisper, clips: dict[str, Clip], reference: dict, clip_id: str
) -> None:
    ref = reference["base_detect_language"][clip_id]
    probs = Transcriber(base_model).detect_language(_clip(clips, clip_id))
    assert len(probs) == 99
    top3 = sorted(probs.items(), key=lambda kv: -kv[1])[:3]
    assert top3[0][0] == ref["expected"] == ref["top3"][0][0]
    assert top3[0][1] == pytest.approx(ref["top3"][0][1], abs=1e-3)
    for code, p in ref["top3"]:
        assert probs[code] == pytest.approx(p, abs=1e-3)


def test_english_only_model_detects_english(tiny_model: Whisper, jfk_audio: np.ndarray) -> None:
    assert Transcriber(tiny_model).detect_language(jfk_audio) == {"en": 1.0}


def test_base_translates_german_into_english(base_model: Whisper, clips: dict[str, Clip]) -> None:
    audio = _clip(clips, "ml_de_picovoice")  # "Der hinter diesem Portal liegenden Raum wurde ..."
    options = TranscribeOptions(decode=DecodeOptions(task="translate"), fallback=FallbackRule(temperatures=(0.0,)))
    result = Transcriber(base_model).transcribe(audio, options)
    assert result.language == "de"  # the detected source language
    text = result.text.strip()
    assert text
    assert sum(c.isascii() for c in text) / len(text) >= 0.9
    words = set(normalize(text).split())
    assert words & {"the", "a", "an", "of", "is", "was", "and", "as", "in"}
    assert not words & {"der", "die", "das", "wurde", "diesem", "raum"}


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (DecodeOptions(task="dance"), "task must be"),
        (DecodeOptions(temperature=-0.1), "temperature must be >= 0"),
        (DecodeOptions(temperature=0.5, beam_size=5, best_of=5), "can't be given together"),
        (DecodeOptions(best_of=5), "best_of with greedy sampling"),
        (DecodeOptions(beam_size=0), "beam_size must be at least 1"),
        (DecodeOptions(patience=1.5), "patience requires beam_size"),
        (DecodeOptions(beam_size=5, patience=0.0), "patience must be positive"),
        (DecodeOptions(length_penalty=1.5), "length_penalty"),
        (DecodeOptions(length_penalty=-0.1), "length_penalty"),
    ],
)
def test_decode_options_validate_rejects_bad_combinations(options: DecodeOptions, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        options.validate()


def test_decode_options_validate_accepts_good_ones() -> None:
    for options in (
        DecodeOptions(),
        DecodeOptions(beam_size=5, patience=2.0, length_penalty=0.5),
        DecodeOptions(temperature=0.6, best_of=5),
        DecodeOptions(task="translate", language="de"),
    ):
        assert options.validate() is options


def test_decode_validates_before_decoding(tiny_model: Whisper, english: Tokenizer, tiny_features: torch.Tensor) -> None:
    with pytest.raises(ConfigError):
        decode(tiny_model, english, tiny_features, DecodeOptions(beam_size=2, best_of=2, temperature=0.3))


def test_with_temperature_switches_between_beams_and_samples() -> None:
    options = DecodeOptions(beam_size=5, patience=1.0, best_of=None)
    assert with_temperature(options, 0.0) == DecodeOptions(beam_size=5, patience=1.0)
    sampled = with_temperature(options, 0.4)
    assert (sampled.temperature, sampled.beam_size, sampled.patience) == (0.4, None, None)
    assert with_temperature(DecodeOptions(temperature=0.4, best_of=5), 0.0).best_of is None
    for t in (0.0, 0.2, 1.0):
        with_temperature(DecodeOptions(beam_size=5, best_of=None), t).validate()


# ---------------------------------------------------------------- logit filters


def _logits(n: int, vocab: int, text: float = 0.0, stamps: float = 0.0, ts_begin: int | None = None) -> torch.Tensor:
    logits = torch.full((n, vocab), text)
    if ts_begin is not None:
        logits[:, ts_begin:] = stamps
    return logits


def test_suppress_blank_only_at_the_first_sampled_token(english: Tokenizer) -> None:
    blank = english.encode(" ")
    assert blank == [220]
    rule = SuppressBlank(english, sample_begin=3)
    first = _logits(2, 51864)
    rule.apply(first, torch.zeros((2, 3), dtype=torch.long))
    assert torch.isinf(first[:, [220, english.eot]]).all()
    assert torch.isfinite(first).sum() == 2 * (51864 - 2)
    later = _logits(2, 51864)
    rule.apply(later, torch.zeros((2, 4), dtype=torch.long))
    assert torch.isfinite(later).all()


def test_suppress_tokens(english: Tokenizer) -> None:
    logits = _logits(2, 51864)
    SuppressTokens([5, 7, 50257]).apply(logits, torch.zeros((2, 1), dtype=torch.long))
    assert torch.isneginf(logits[:, [5, 7, 50257]]).all()
    assert torch.isfinite(logits).sum() == 2 * (51864 - 3)


def test_suppress_token_ids(english: Tokenizer, reference: dict) -> None:
    specials = [english.transcribe, english.translate, english.sot, english.sot_prev, english.sot_lm, english.no_speech]
    expected = sorted(set(reference["tokenizer"]["english"]["non_speech_tokens"] + specials))
    assert suppress_token_ids(english, "-1") == expected
    assert suppress_token_ids(english, None) == sorted(specials)
    assert suppress_token_ids(english, "1, 2") == sorted({1, 2, *specials})
    assert suppress_token_ids(english, (9, -1)) == sorted({9, *expected})


class TestApplyTimestampRules:
    """Sample begins after one prompt token; ts(i) is the token of time i * 0.02 s."""

    VOCAB = 51864

    @pytest.fixture
    def tok(self, english: Tokenizer) -> Tokenizer:
        return english

    def ts(self, tok: Tokenizer, i: int) -> int:
        return tok.timestamp_begin + i

    def run(self, tok: Tokenizer, history: list[int], text: float = 10.0, max_initial: int | None = 50) -> torch.Tensor:
        """Logits (vocab,) after the rules, for one row whose sampled tokens are ``history``."""
        logits = _logits(1, self.VOCAB, text=text, stamps=0.0, ts_begin=tok.timestamp_begin)
        tokens = torch.tensor([[tok.sot, *history]])
        ApplyTimestampRules(tok, sample_begin=1, max_initial_timestamp_index=max_initial).apply(logits, tokens)
        return logits[0]

    def allowed(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(logits)

    def test_initial_token_is_an_early_timestamp(self, tok: Tokenizer) -> None:
        ok = self.allowed(self.run(tok, []))
        assert not ok[: tok.timestamp_begin].any()  # no text, no eot, no <|notimestamps|>
        assert ok[self.ts(tok, 0) : self.ts(tok, 50) + 1].all()
        assert not ok[self.ts(tok, 51) :].any()  # max_initial_timestamp 1.0 s
        ok = self.allowed(self.run(tok, [], max_initial=None))
        assert ok[tok.timestamp_begin :].all()

    def test_no_timestamps_token_is_always_suppressed(self, tok: Tokenizer) -> None:
        for history in ([], [self.ts(tok, 0)], [self.ts(tok, 0), 843]):
            assert torch.isneginf(self.run(tok, history)[tok.no_timestamps])

    def test_after_an_opening_timestamp_text_follows(self, tok: Tokenizer) -> None:
        ok = self.allowed(self.run(tok, [self.ts(tok, 0)]))
        assert not ok[tok.timestamp_begin :].any()
        assert ok[843] and ok[tok.eot]

    def test_after_text_timestamps_do_not_decrease(self, tok: Tokenizer) -> None:
        ok = self.allowed(self.run(tok, [self.ts(tok, 5), 843]))
        assert ok[843] and ok[tok.eot]
        assert not ok[self.ts(tok, 0) : self.ts(tok, 6)].any()  # a segment can't have zero length
        assert ok[self.ts(tok, 6) :].all()

    def test_a_closing_timestamp_is_followed_by_a_timestamp_or_eot(self, tok: Tokenizer) -> None:
        ok = self.allowed(self.run(tok, [self.ts(tok, 0), 843, self.ts(tok, 40)]))
        assert not ok[: tok.eot].any()  # no text inside a pair
        assert ok[tok.eot]
        assert not ok[self.ts(tok, 0) : self.ts(tok, 40)].any()
        assert ok[self.ts(tok, 40) :].all()  # the next segment may start where this one ended

    def test_after_a_complete_pair_text_follows(self, tok: Tokenizer) -> None:
        ok = self.allowed(self.run(tok, [self.ts(tok, 0), 843, self.ts(tok, 40), self.ts(tok, 40)]))
        assert not ok[tok.timestamp_begin :].any()
        assert ok[843] and ok[tok.eot]

    def test_timestamps_win_when_likelier_than_any_text_token(self, tok: Tokenizer) -> None:
        # text logits 0 and ~1500 allowed timestamps at 0: the timestamps' total mass dominates
        ok = self.allowed(self.run(tok, [self.ts(tok, 0), 843], text=0.0))
        assert not ok[: tok.timestamp_begin].any()
        assert ok[self.ts(tok, 1) :].all()

    def test_rows_are_independent(self, tok: Tokenizer) -> None:
        logits = _logits(2, self.VOCAB, text=10.0, ts_begin=tok.timestamp_begin)
        rows = torch.tensor([[tok.sot, self.ts(tok, 0), 843], [tok.sot, self.ts(tok, 0), 843]])
        rows[1, 2] = self.ts(tok, 0)  # row 1 just completed a pair
        ApplyTimestampRules(tok, 1, 50).apply(logits, rows)
        assert torch.isfinite(logits[0, self.ts(tok, 10)])
        assert torch.isneginf(logits[1, self.ts(tok, 10)])


# ---------------------------------------------------------------- decoders and ranking


def test_greedy_decoder_keeps_finished_rows_finished() -> None:
    eot = 3
    decoder = GreedyDecoder(temperature=0.0, eot=eot)
    tokens = torch.tensor([[0, eot], [0, 1]])
    logits = torch.tensor([[0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
    sums = torch.zeros(2)
    tokens, done = decoder.update(tokens, logits, sums, cache=None)  # type: ignore[arg-type]
    assert tokens[:, -1].tolist() == [eot, eot]
    assert done
    assert sums[0] == 0.0  # a finished row gains no log-probability
    assert sums[1] == pytest.approx(torch.log_softmax(logits[1], -1)[eot].item())


@pytest.mark.parametrize("width", [51864, 51865, 1000])
def test_row_topk_equals_topk(width: int) -> None:
    generator = torch.Generator().manual_seed(width)
    x = torch.randn(5, width, generator=generator) * 4
    x[:, ::7] = -torch.inf  # suppressed tokens
    x[0, 1234 % width] = x[0, 4321 % width] = 50.0  # two best in one row, maybe in one block
    x[1, -3:] = 60.0  # the best in the padded last block
    values, ids = row_topk(x, 6)
    expected = x.topk(6, dim=-1)
    assert torch.equal(values, expected.values)
    assert torch.equal(x.gather(1, ids), expected.values)  # the same values (ties may swap ids)
    assert ids[1, :3].sort().values.tolist() == [width - 3, width - 2, width - 1]


def test_row_argmax_equals_argmax() -> None:
    """The first of equal maxima, rows of suppressed tokens, a view of a step's last logits, and
    float16 rows, as torch's argmax gives them."""
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 3, 51864, generator=generator) * 4
    logits[:, :, ::7] = -torch.inf
    logits[0, -1, 9000] = logits[0, -1, 40000] = 50.0  # a tie: the first wins
    logits[1, -1, :] = -torch.inf  # every token suppressed
    logits[2, -1, -1] = 60.0  # the last token
    for x in (logits[:, -1], logits[:, -1].contiguous(), logits[:, -1].half()):
        assert torch.equal(row_argmax(x), x.argmax(dim=-1))
    assert row_argmax(logits[:, -1]).tolist()[:3] == [9000, 0, 51863]


def test_rank_by_likelihood() -> None:
    candidates = [[1] * 10, [1] * 2]
    sums = [-5.0, -2.0]
    assert rank_by_likelihood(candidates, sums, None) == 0  # -0.5 per token beats -1.0
    penalty = [((5 + len(c)) / 6) ** 1.0 for c in candidates]
    assert rank_by_likelihood(candidates, sums, 1.0) == int(
        np.argmax([s / p for s, p in zip(sums, penalty, strict=True)])
    )
    assert rank_by_likelihood([[1], [1]], [-3.0, -1.0], 0.0) == 1


def test_compression_ratio() -> None:
    assert compression_ratio("the the the the " * 20) > 2.4
    assert compression_ratio(JFK_REFERENCE) < 2.4
    assert compression_ratio("") == 0.0


# ---------------------------------------------------------------- prompt and prefix


def test_initial_tokens_layout(english: Tokenizer) -> None:
    prompt = english.encode(" Hello world.")
    assert initial_tokens(english, DecodeOptions(), 448, 224) == [english.sot]
    assert initial_tokens(english, DecodeOptions(without_timestamps=True), 448, 224) == [
        english.sot,
        english.no_timestamps,
    ]
    assert initial_tokens(english, DecodeOptions(prompt="  Hello world. "), 448, 224) == [
        english.sot_prev,
        *prompt,
        english.sot,
    ]
    assert initial_tokens(english, DecodeOptions(prompt=(1, 2, 3)), 448, 224) == [
        english.sot_prev,
        1,
        2,
        3,
        english.sot,
    ]


def test_initial_tokens_keep_the_last_223_prompt_tokens(english: Tokenizer) -> None:
    prompt = tuple(range(1000))
    tokens = initial_tokens(english, DecodeOptions(prompt=prompt), 448, 224)
    assert tokens[0] == english.sot_prev and tokens[-1] == english.sot
    assert tokens[1:-1] == list(range(1000 - 223, 1000))


def test_initial_tokens_multilingual(multilingual: Tokenizer, reference: dict) -> None:
    tokens = initial_tokens(multilingual, DecodeOptions(prompt=(5,), without_timestamps=True), 448, 224)
    assert tokens == [
        multilingual.sot_prev,
        5,
        *reference["tokenizer"]["multilingual"]["sot_sequence_including_notimestamps"],
    ]


def test_prompt_changes_the_decoded_tokens(
    tiny_model: Whisper, english: Tokenizer, tiny_features: torch.Tensor, reference: dict
) -> None:
    plain = reference["jfk"]["tiny.en"]["greedy_tokens_timestamps_False"]
    options = DecodeOptions(
        without_timestamps=True, prompt="Kennedy's inaugural address, 1961: 'And so, my fellow Americans...'"
    )
    prompted = decode(tiny_model, english, tiny_features, options)[0]
    assert prompted.tokens != plain
    assert english.sot_prev not in prompted.tokens and english.sot not in prompted.tokens  # the prompt is not output
    assert word_error_rate([JFK_REFERENCE], [prompted.text]) <= 0.1


def test_prefix_forces_the_start_with_a_short_sample_len(
    english: Tokenizer, tiny_model: Whisper, tiny_features: torch.Tensor
) -> None:
    options = DecodeOptions(without_timestamps=True, prefix="Ich bin", sample_len=100)
    assert initial_tokens(english, options, 448, 100) == [
        english.sot,
        english.no_timestamps,
        *english.encode(" Ich bin"),
    ]
    prefixed = decode(tiny_model, english, tiny_features, options)[0]
    plain = decode(tiny_model, english, tiny_features, DecodeOptions(without_timestamps=True, sample_len=100))[0]
    assert prefixed.tokens != plain.tokens
    assert not prefixed.text.startswith("Ich bin")  # the result holds only the tokens after the prefix


def test_prefix_is_kept_with_the_default_sample_len(english: Tokenizer) -> None:
    tokens = initial_tokens(english, DecodeOptions(prefix="And so"), 448, 224)
    assert tokens == [english.sot, *english.encode(" And so")]


def test_sample_len_bounds_the_output(tiny_model: Whisper, english: Tokenizer, tiny_features: torch.Tensor) -> None:
    result = decode(tiny_model, english, tiny_features, DecodeOptions(without_timestamps=True, sample_len=5))[0]
    assert len(result.tokens) == 5
    assert result.tokens == [843, 523, 616, 5891, 3399]  # "And so my fellow Americans"
    assert math.isfinite(result.avg_logprob)
