"""Batched greedy decoding in WhisperRecognizer equals decoding each request alone.

The requests are real: the ones a Streamer issues over a few eval clips (windows of different
lengths, so of different fitted audio contexts, with and without prompts and prefixes). Each
batch goes through ``recognize`` once with batched decoding and again one request at a time on
the reference path (``batch_decode=False``, ``decode()`` per window); tokens, text and words must
be the same.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from benchmarks.scoring import Clip, normalize
from streamwhisper.audio.files import load_audio
from streamwhisper.audio.mel import log_mel
from streamwhisper.model import serving
from streamwhisper.model.batch_decoding import decode_greedy_batch, loops, window_cross
from streamwhisper.model.config import RecognizerConfig
from streamwhisper.model.decoding import DecodingResult
from streamwhisper.model.fallback import FallbackRule
from streamwhisper.model.interrupt import Interrupted, interruptible
from streamwhisper.model.loading import load_model
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.model.serving import WhisperRecognizer
from streamwhisper.model.whisper import Whisper
from streamwhisper.runtime.replay import replay
from streamwhisper.streaming.config import PolicyConfig
from streamwhisper.streaming.screening import screen
from streamwhisper.streaming.streamer import Streamer
from streamwhisper.whisper_input import N_FRAMES

pytestmark = pytest.mark.slow  # end to end: the real model

CLIPS = ("en_jfk", "en_ls_dev_1272-141231-0002")


class _Recording:
    """Serves a Streamer with the real recogniser and keeps every request it was asked."""

    def __init__(self, recognizer: WhisperRecognizer) -> None:
        self.recognizer = recognizer
        self.requests: list[RecognitionRequest] = []

    def recognize(self, requests: list[RecognitionRequest]) -> list[Hypothesis]:
        self.requests.extend(r.with_tokens(self.recognizer.encode_text) for r in requests)  # as decoded
        return self.recognizer.recognize(requests)


@pytest.fixture(scope="module")
def default_model() -> Whisper:
    return load_model("tiny.en")  # the default compute type (int8 logits), as the daemon runs it


@pytest.fixture(scope="module")
def streamed(default_model: Whisper, clips: dict[str, Clip]) -> list[RecognitionRequest]:
    """Every request a Streamer issued over the clips."""
    recognizer = WhisperRecognizer(default_model)
    recording = _Recording(recognizer)
    for clip in CLIPS:
        replay(Streamer(), recording, load_audio(clips[clip].wav), aware=False)
    return recording.requests


# A fixed audio context ("auto" would encode a batch fitted and a window alone at 30 s), fitted
# with a small minimum so that a batch holds windows of several encoder widths. Loops decoded
# again at longer contexts: the batched decoder stops a row as it loops, the reference path runs
# on to its budget, so their results are comparable once neither loops.
FIT = {"audio_ctx": "fit", "min_ctx_s": 4.0, "beam_size": 0, "retry_batch_loops": True}  # greedy


def _check_variety(recognizer: WhisperRecognizer, batch: list[RecognitionRequest]) -> None:
    """The batch exercises what batching must get right (else the comparison proves little)."""
    widths = {recognizer._frames(r, len(batch)) for r in batch}
    assert len(widths) >= 2, "windows of different fitted audio contexts"
    assert len({r.mel.shape[-1] for r in batch}) >= len(batch) // 2, "windows of different lengths"
    assert any(r.prompt for r in batch) and any(not r.prompt for r in batch)
    assert any(r.prefix for r in batch) and any(not r.prefix for r in batch)


# How far batched and alone log-probabilities may differ: tokens must be equal, and a value may
# move only by what the arithmetic can change. float32 (tiny_model): summation order in
# differently blocked GEMMs, measured <= 3e-6 on AVX2 and AVX-512 kernels; this is the strict
# check of batching itself (masks, padding, positions, caches), run on the same batches. The int8
# logits projection (the default compute type) quantises each call's activations with one scale
# for the whole call (per tensor, fbgemm's dynamic quantisation), so a batched row is rounded at
# a step its batch sets: two random rows, the second 1x, 3x, 10x the first, moved the first
# row's logits by 0.02, 0.06, 0.16 from alone. A token's probability p moves by at most
# p(1 - p) <= 1/4 of its logit's shift against the others. Measured on words: <= 6e-4 on an
# AMD EPYC with AVX-512 (rows of similar range), but 1.7e-2 on the low-probability words of a
# window that loops ("Ask not. Ask not. ...") in a CI run on a CPU whose streamed windows
# differ. 5e-2 admits that rounding; tokens and words stay equal.
FLOAT32_TOLERANCE = 1e-5
INT8_LOGITS_TOLERANCE = 5e-2


def _tolerance(model: Whisper) -> float:
    return FLOAT32_TOLERANCE if model.decoder.logits is None else INT8_LOGITS_TOLERANCE


def _assert_same(batched: list[Hypothesis], alone: list[Hypothesis], tolerance: float) -> None:
    assert len(batched) == len(alone)
    for i, (b, a) in enumerate(zip(batched, alone, strict=True)):
        where = f"request {i}: {a.text!r}"
        assert b.tokens == a.tokens, where
        assert b.text == a.text, where
        assert b.temperature == a.temperature, where
        assert b.language == a.language, where
        assert b.avg_logprob == pytest.approx(a.avg_logprob, abs=tolerance), where
        assert b.no_speech_prob == pytest.approx(a.no_speech_prob, abs=tolerance), where
        assert b.compression_ratio == pytest.approx(a.compression_ratio), where
        assert [w.word for w in b.words] == [w.word for w in a.words], where
        for wb, wa in zip(b.words, a.words, strict=True):
            assert wb.start == pytest.approx(wa.start, abs=0.02), (where, wb, wa)
            assert wb.end == pytest.approx(wa.end, abs=0.02), (where, wb, wa)
            assert wb.probability == pytest.approx(wa.probability, abs=tolerance), (where, wb, wa)


def _compare(
    model: Whisper, batch: list[RecognitionRequest], options: RecognizerConfig | None = None
) -> list[Hypothesis]:
    options = replace(options or RecognizerConfig(), **FIT)
    batched = WhisperRecognizer(model, replace(options, batch_decode=True)).recognize(batch)
    reference = WhisperRecognizer(model, replace(options, batch_decode=False))  # one generator, same order
    alone = [reference.recognize([r])[0] for r in batch]
    _assert_same(batched, alone, _tolerance(model))
    return batched


def _windows_2_to_10_s(streamed: list[RecognitionRequest]) -> list[RecognitionRequest]:
    """Windows of 2-10 s, those without a forced prefix (rarer) first."""
    windows = [r for r in streamed if 200 <= r.mel.shape[-1] <= 1000]
    return sorted(windows, key=lambda r: bool(r.prefix))


def test_streamed_requests_decode_the_same_batched(
    default_model: Whisper, tiny_model: Whisper, streamed: list[RecognitionRequest]
) -> None:
    # the windows of 2-10 s of two streams, as concurrent sessions would send them
    batch = _windows_2_to_10_s(streamed)[:16]
    _check_variety(WhisperRecognizer(default_model, RecognizerConfig(**FIT)), batch)
    hypotheses = _compare(default_model, batch)
    _compare(tiny_model, batch)  # the same batch without int8 rounding: float32's tolerance
    assert sum(bool(h.words) for h in hypotheses) >= len(batch) // 2
    assert len({len(h.tokens) for h in hypotheses}) >= 3, "rows finish at different steps"


def test_short_windows_float32(tiny_model: Whisper, streamed: list[RecognitionRequest]) -> None:
    """The short windows (under 3 s) with a few long ones, on the fp32 model (plain logits)."""
    batch = [r for r in streamed if r.mel.shape[-1] < 200] + _windows_2_to_10_s(streamed)[::5]
    _check_variety(WhisperRecognizer(tiny_model, RecognizerConfig(**FIT)), batch)
    _compare(tiny_model, batch)


def test_sample_len_and_context_budgets(default_model: Whisper, streamed: list[RecognitionRequest]) -> None:
    """Rows cut by their own sample_len (window length) and by the 448-token context."""
    recognizer = WhisperRecognizer(default_model)
    # a window of 2 s at least: its own sample_len (8 + 6 per second) is above max_new_tokens
    with_prefix = next(r for r in streamed if r.prefix and r.mel.shape[-1] >= 200)
    long_context = replace(  # both longer than their budgets: initial_tokens keeps their ends
        with_prefix,
        prompt=tuple(recognizer.encode_text(" Ask not what your country can do for you." * 40)),
        prefix=with_prefix.prefix * 300,
    )
    short = replace(streamed[0], mel=streamed[0].mel[:, :150])  # 1.5 s: sample_len 8 + 9
    batch = [long_context, short, *_windows_2_to_10_s(streamed)[:2], replace(long_context, prompt=())]
    options = RecognizerConfig(max_new_tokens=12, fallback=FallbackRule(temperatures=(0.0,)))
    hypotheses = _compare(default_model, batch, options)
    # 223 prompt + 212 prefix (224 - sample_len) + 3 special tokens: 10 tokens to n_ctx
    assert len(hypotheses[0].tokens) == 10, "the long-context row stops at the context"
    assert max(len(h.tokens) for h in hypotheses[1:]) == 12, "some row stops at max_new_tokens"


def test_detected_languages_batched(base_model: Whisper, clips: dict[str, Clip]) -> None:
    """Multilingual: rows with languages detected (de, en) or given, each its own sot sequence."""
    mels = []
    for clip, seconds in (("ml_de_picovoice", 5.0), ("en_jfk", 4.0)):
        mels.append(log_mel(load_audio(clips[clip].wav)[: int(seconds * 16000)], base_model.dims.n_mels))
    recognizer = WhisperRecognizer(base_model)
    prompt = tuple(recognizer.encode_text(" Und so weiter."))
    batch = [
        RecognitionRequest(mel=mels[0], prompt=prompt),
        RecognitionRequest(mel=mels[1], prefix=tuple(recognizer.encode_text(" And so"))),
        RecognitionRequest(mel=mels[0], language="de", task="translate"),
    ]
    hypotheses = _compare(base_model, batch)
    assert [h.language for h in hypotheses] == ["de", "en", "de"]


def test_a_request_decodes_the_same_whatever_its_batch(
    default_model: Whisper, streamed: list[RecognitionRequest]
) -> None:
    """Windows are encoded at their own audio context: a short window batched with a long one
    gives what it gives alone (encoding every window at the batch's longest did not)."""
    short = min(streamed, key=lambda r: r.mel.shape[-1])
    long = max(streamed, key=lambda r: r.mel.shape[-1])
    recognizer = WhisperRecognizer(default_model, RecognizerConfig(**FIT))
    assert recognizer._frames(short, 3) < recognizer._frames(long, 3)
    batched, alone = recognizer.recognize([long, short, long])[1:2], recognizer.recognize([short])
    _assert_same(batched, alone, _tolerance(default_model))


def _encoded_widths(recognizer: WhisperRecognizer) -> list[list[int]]:
    """From now on, the widths (mel frames) of each of ``recognizer``'s encoder calls, a list a call."""
    calls: list[list[int]] = []
    encode = recognizer._encode

    def spy(requests: list[RecognitionRequest], frames: list[int]) -> list:  # type: ignore[type-arg]
        calls.append(list(frames))
        return encode(requests, frames)

    recognizer._encode = spy  # type: ignore[method-assign]
    return calls


def test_a_crowded_window_alone_is_served_as_in_a_batch(
    default_model: Whisper, streamed: list[RecognitionRequest]
) -> None:
    """A window the worker took while saturated (``crowded``) is encoded at its fitted context
    and decoded greedily, as in a batch, where alone it gets 20 s and beam search (twice the
    cost, which a saturated daemon pays in every stream's latency)."""
    recognizer = WhisperRecognizer(default_model)  # the defaults: "auto" context, beam for one
    widths = _encoded_widths(recognizer)
    window, other = _windows_2_to_10_s(streamed)[:2]
    crowded = recognizer.recognize([replace(window, crowded=True)])
    batched = recognizer.recognize([window, other])[:1]
    recognizer.recognize([window])
    assert widths[0][0] < 2000 and widths[-1] == [2000]  # (mel frames: 10 s, 20 s)
    _assert_same(crowded, batched, _tolerance(default_model))


def test_a_window_alone_is_encoded_at_20_s_and_a_files_window_at_30_s(
    default_model: Whisper, base_model: Whisper, streamed: list[RecognitionRequest], clips: dict[str, Clip]
) -> None:
    """Served alone, a streamed window of 2-10 s is fitted to ``alone_min_ctx_s`` (20 s costs
    about 30 % less than 30 s and decodes as well); a longer window is fitted to its length; a
    window with timestamp tokens (a file's, segmented as the reference does) gets 30 s, so does
    one whose language a multilingual model detects (at 20 s base took an English-German
    clip's English for German), and ``alone_min_ctx_s = 30`` is the full context for every
    window."""
    window = _windows_2_to_10_s(streamed)[0]
    jfk = load_audio(clips["en_jfk"].wav)
    longer = RecognitionRequest(mel=log_mel(np.concatenate([jfk, jfk])))  # 22 s

    def served(config: RecognizerConfig, request: RecognitionRequest, model: Whisper = default_model) -> int:
        recognizer = WhisperRecognizer(model, config)
        widths = _encoded_widths(recognizer)
        hypothesis = recognizer.recognize([request])[0]
        assert hypothesis.text.strip(), "the window was heard"
        return widths[0][0]

    step = 200  # ctx_step_s, in mel frames
    assert served(RecognizerConfig(), window) == 2000
    assert served(RecognizerConfig(), longer) == -(-longer.mel.shape[-1] // step) * step == 2200
    assert served(RecognizerConfig(), replace(window, timestamps=True)) == N_FRAMES
    assert served(RecognizerConfig(alone_min_ctx_s=30.0), window) == N_FRAMES
    assert served(RecognizerConfig(), window, base_model) == N_FRAMES  # language None: detected
    assert served(RecognizerConfig(), replace(window, language="en"), base_model) == 2000


def test_a_turns_last_window_in_a_batch_is_fitted_to_endpoint_min_ctx_s(
    default_model: Whisper, streamed: list[RecognitionRequest]
) -> None:
    """Crowded (as in a batch), a 2-10 s window is fitted to ``min_ctx_s`` (10 s), a turn's last
    window (``endpoint``) to ``endpoint_min_ctx_s`` when that is longer; alone, both get
    ``alone_min_ctx_s``."""
    window = _windows_2_to_10_s(streamed)[0]
    crowded, last = replace(window, crowded=True), replace(window, crowded=True, endpoint=True)

    def widths(config: RecognizerConfig, *requests: RecognitionRequest) -> list[list[int]]:
        recognizer = WhisperRecognizer(default_model, config)
        calls = _encoded_widths(recognizer)
        for request in requests:
            recognizer.recognize([request])
        return calls

    assert widths(RecognizerConfig(), crowded, last) == [[1000], [1000]]  # (mel frames)
    assert widths(RecognizerConfig(endpoint_min_ctx_s=20.0), crowded, last) == [[1000], [2000]]
    assert widths(RecognizerConfig(endpoint_min_ctx_s=30.0), replace(window, endpoint=True)) == [[2000]]  # alone
    assert widths(RecognizerConfig(endpoint_min_ctx_s=4.0), last) == [[1000]]  # (min_ctx_s still)


def _served_go_forward(
    model: Whisper, clips: dict[str, Clip], config: RecognizerConfig, crowded: bool = True
) -> list[tuple[RecognitionRequest, list[int], DecodingResult, Hypothesis]]:
    """Each window the stream of "Go forward 10 meters." asks for, served ``crowded`` (fitted to
    ``config.min_ctx_s``) or alone (to ``alone_min_ctx_s``): the window, the widths (mel frames)
    it was encoded at, its first greedy result and its hypothesis."""
    recognizer = WhisperRecognizer(model, config)
    recording = _Recording(recognizer)
    replay(Streamer(), recording, load_audio(clips["en_ps_goforward"].wav), aware=False)
    calls = _encoded_widths(recognizer)
    firsts: list[list[DecodingResult]] = []
    batch_decode = serving.decode_greedy_batch

    def decode_spy(*args, **kwargs) -> list[DecodingResult]:  # type: ignore[no-untyped-def]
        results = batch_decode(*args, **kwargs)
        firsts[-1].extend(results)
        return results

    served = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serving, "decode_greedy_batch", decode_spy)
        for window in recording.requests:
            before = len(calls)
            firsts.append([])
            hypothesis = recognizer.recognize([replace(window, crowded=crowded)])[0]
            widths = [w for call in calls[before:] for w in call]
            served.append((window, widths, firsts[-1][0], hypothesis))
    return served


def test_a_window_that_loops_at_a_fitted_context_stops_and_is_decoded_again_at_20_s(
    default_model: Whisper, clips: dict[str, Clip]
) -> None:
    """With ``retry_batch_loops``, a crowded window that loops at its fitted context (here "Go
    forward 10 meters.", 2 s fitted to 4 s) stops as the loop starts, not at its token budget,
    and is decoded again at 20 s, where this one does not loop."""
    config = RecognizerConfig(min_ctx_s=4.0, retry_batch_loops=True)
    looped = [s for s in _served_go_forward(default_model, clips, config) if len(s[1]) > 1]
    assert looped, "a window of the clip loops at its fitted context"
    at_20_s = WhisperRecognizer(default_model, RecognizerConfig(audio_ctx="fit", min_ctx_s=20.0, beam_size=0))
    for window, encoded, first, hypothesis in looped:
        budget = 8 + round(6.0 * window.mel.shape[-1] / 100)  # (the default max_tokens_per_s)
        assert first.looped and len(first.tokens) < budget, "the loop stopped before the budget"
        assert encoded == [400, 2000] and not hypothesis.looping
        assert hypothesis.text == at_20_s.recognize([window])[0].text


def test_a_window_in_a_batch_that_loops_is_encoded_once_and_its_loop_cut(
    default_model: Whisper, clips: dict[str, Clip]
) -> None:
    """By default a crowded window that loops at its fitted context is not encoded again (a
    turn's final waits for one encoding on its core, not two): it stops as the loop starts, and
    the streaming policy keeps the loop's first occurrence, "Go forward 10 meters." once."""
    served = _served_go_forward(default_model, clips, RecognizerConfig(min_ctx_s=4.0))
    assert all(len(encoded) == 1 for _, encoded, _, _ in served)
    looped = [(window, first, hypothesis) for window, _, first, hypothesis in served if first.looped]
    assert looped, "a window of the clip loops at its fitted context"
    tokenizer = WhisperRecognizer(default_model)._tokenizer
    for window, first, hypothesis in looped:
        assert list(hypothesis.tokens) == list(first.tokens)
        prefix = tokenizer.decode(list(window.prefix))  # the committed words, forced
        words, reason = screen(hypothesis, PolicyConfig(), prefix=prefix)
        said = normalize(" ".join([prefix, *(w.word for w in words)]))
        assert reason == "loop" and said == "go forward 10 meters", (prefix, hypothesis.text)


def test_a_window_alone_that_loops_at_a_fitted_context_is_decoded_again(
    default_model: Whisper, clips: dict[str, Clip]
) -> None:
    """A window served alone keeps the retry by default: fitted to 4 s here (20 s by default),
    "Go forward 10 meters." loops, stops as the loop starts and is decoded again at 20 s."""
    config = RecognizerConfig(alone_min_ctx_s=4.0, beam_size=0)
    served = _served_go_forward(default_model, clips, config, crowded=False)
    looped = [(encoded, first, hypothesis) for _, encoded, first, hypothesis in served if first.looped]
    assert looped, "a window of the clip loops at its fitted context"
    assert all(encoded == [400, 2000] and not hypothesis.looping for encoded, _, hypothesis in looped)


def test_a_fallback_sample_depends_on_its_window_alone(
    default_model: Whisper, streamed: list[RecognitionRequest]
) -> None:
    """The sampled fallback of a window is the same whatever the recogniser served before it
    (a shared generator made a music clip's captions depend on the clips before)."""
    # every result goes to the fallback (its log-prob is below 0), sampled at temperature 1
    options = RecognizerConfig(fallback=FallbackRule(temperatures=(0.0, 1.0), logprob_threshold=0.0), beam_size=0)
    windows = _windows_2_to_10_s(streamed)[:4]
    fresh = [WhisperRecognizer(default_model, options).recognize([w])[0] for w in windows]
    assert all(h.temperature == 1.0 for h in fresh), "the fallback ran"
    greedy_only = replace(options, fallback=replace(options.fallback, temperatures=(0.0,)))
    greedy = WhisperRecognizer(default_model, greedy_only).recognize(windows)
    assert any(s.tokens != g.tokens for s, g in zip(fresh, greedy, strict=True)), "the samples are random"
    served = WhisperRecognizer(default_model, options)
    in_turn = [served.recognize([w])[0] for w in windows]
    again = [served.recognize([w])[0] for w in windows[::-1]][::-1]
    assert [h.tokens for h in in_turn] == [h.tokens for h in fresh]
    assert [h.tokens for h in again] == [h.tokens for h in fresh]


def test_a_fallback_sample_that_loops_stops_as_the_loop_starts(
    default_model: Whisper, clips: dict[str, Clip]
) -> None:
    """The fallback's last sample is kept whatever it says, so it stops once it loops, as a
    batched greedy row does: at a fitted 10 s context the window samples "Go forward 10 meters."
    again and again at 0.4; it stops after three (23 tokens, not its 55-token budget: a turn's
    final waited 1.5-1.8 s for such samples at eight streams), and the screening keeps the words
    before the loop and its first occurrence, as from the whole sample."""
    # every result goes to the fallback (its log-prob is below 0), sampled at 0.4
    rule = FallbackRule(temperatures=(0.0, 0.4), logprob_threshold=0.0)
    recognizer = WhisperRecognizer(default_model, RecognizerConfig(fallback=rule))
    window = replace(_go_forward(clips, 6.4, 0.5), crowded=True)
    budget = recognizer._decode_options(window, None).sample_len
    hypothesis = recognizer.recognize([window])[0]
    assert hypothesis.temperature == 0.4, "the fallback ran"
    assert budget is not None and len(hypothesis.tokens) < budget, "the sample stopped as it looped"
    assert loops(list(hypothesis.tokens))
    words, reason = screen(hypothesis, PolicyConfig())
    said = normalize(" ".join(w.word for w in words))
    assert reason == "loop" and said == "ask what you can do for your country go forward 10 meters", hypothesis.text


def test_loops_are_blocks_said_three_times_over_twelve_tokens() -> None:
    go = [1, 2, 3, 4, 5, 6]  # " Go forward 10 meters."
    assert loops([7, 8, *go * 3])
    assert not loops([7, 8, *go * 2]), "said twice: speech does that"
    assert loops([9] * 12) and not loops([9] * 11)
    assert not loops([3, 4] * 5), "no, no, no, no, no"
    assert loops([3, 4] * 6)
    assert not loops(list(range(40)))


def _go_forward(clips: dict[str, Clip], start_s: float, pause_s: float) -> RecognitionRequest:
    """The end of JFK's sentence, a pause, then "go forward ten meters", with the sentence's
    start as the prompt: about 8 s."""
    jfk, go = load_audio(clips["en_jfk"].wav), load_audio(clips["en_ps_goforward"].wav)
    audio = np.concatenate([jfk[int(start_s * 16000) :], np.zeros(int(pause_s * 16000), np.float32), go])
    prompt = " And so, my fellow Americans, ask not what your country can do for you,"
    return RecognitionRequest(mel=log_mel(audio), prompt_text=prompt, max_prompt_tokens=64)


def test_a_window_that_loops_at_a_fitted_context_is_decoded_again_at_a_longer_one(
    default_model: Whisper, clips: dict[str, Clip]
) -> None:
    """Encoded at a fitted 10 s context, as a batch encodes it, the window decodes to "Go
    forward 10 meters." said again and again (at 30 s it does not). The batch stops the row once
    the loop shows (23 tokens, where the loop would run on to its budget) and, with
    ``retry_batch_loops``, decodes the window again at a longer context (``LOOP_RETRY_S``: 20 s,
    where these decode as at 30 s); one window at a time (the reference path) does the same."""
    recognizer = WhisperRecognizer(default_model, RecognizerConfig(retry_batch_loops=True))
    batch = [_go_forward(clips, 6.4, 0.5), _go_forward(clips, 8.0, 1.0)]
    tokened = [r.with_tokens(recognizer.encode_text) for r in batch]
    fitted = recognizer._encode(tokened, [recognizer._frames(r, len(batch)) for r in batch])
    assert all(f.shape[1] < default_model.dims.n_audio_ctx for f in fitted)
    windows = [window_cross(default_model, f) for f in fitted]
    options = [recognizer._decode_options(r, None) for r in tokened]
    stopped = decode_greedy_batch(default_model, recognizer._tokenizer, windows, options, stop_loops=[True, True])
    ran_on = decode_greedy_batch(default_model, recognizer._tokenizer, windows, options)
    assert all(r.looped for r in stopped) and not any(r.looped for r in ran_on)
    assert all(len(s.tokens) < len(r.tokens) for s, r in zip(stopped, ran_on, strict=True)), "stopped early"
    assert all(recognizer.config.fallback.is_loop(r) for r in ran_on), "a loop by the fallback rule too"

    hypotheses = recognizer.recognize(batch)
    for h in hypotheses:
        assert not h.looping and h.temperature == 0.0
        assert normalize(h.text) == "ask what you can do for your country go forward 10 meters"
    full = WhisperRecognizer(default_model, RecognizerConfig(audio_ctx="full")).recognize(batch)
    assert [h.tokens for h in hypotheses] == [h.tokens for h in full]
    _compare(default_model, [batch[0], replace(batch[1], prompt_text="")])  # fitted too


@pytest.mark.parametrize("stop_at", [1, 4, 12])
def test_an_interrupted_recognition_stops_at_a_checkpoint_and_changes_nothing(
    default_model: Whisper, streamed: list[RecognitionRequest], stop_at: int
) -> None:
    """The worker stops a batch for an urgent request at the model's checkpoints (encoder
    blocks, decoder steps, beam and batched greedy): the pass raises, and the same requests
    recognised again give what they give when nobody interrupts them."""
    # the longest windows without a forced prefix: the most decoder steps, whatever the request
    # schedule made them (a window's committed words, forced, leave it few tokens to decode)
    unforced = [r for r in _windows_2_to_10_s(streamed) if not r.prefix]
    windows = sorted(unforced, key=lambda r: r.mel.shape[-1])[-3:]
    for config, batch in ((RecognizerConfig(), windows[-1:]), (RecognizerConfig(beam_size=0), windows)):
        recognizer = WhisperRecognizer(default_model, config)
        stopping = _Checkpoints(stop_at)
        with interruptible(stopping), pytest.raises(Interrupted):
            recognizer.recognize(batch)
        assert stopping.passed == stop_at
        counting = _Checkpoints(None)
        with interruptible(counting):
            again = recognizer.recognize(batch)
        assert counting.passed >= stop_at  # encoder blocks and decoder steps
        uninterrupted = WhisperRecognizer(default_model, config).recognize(batch)
        assert [h.tokens for h in again] == [h.tokens for h in uninterrupted]
        assert [h.words for h in again] == [h.words for h in uninterrupted]


class _Checkpoints:
    """Counts the checkpoints passed; says stop at the ``stop_at``-th (never with None)."""

    def __init__(self, stop_at: int | None) -> None:
        self.stop_at = stop_at
        self.passed = 0

    def __call__(self) -> bool:
        self.passed += 1
        return self.passed == self.stop_at
