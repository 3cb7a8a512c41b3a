"""Streamer end to end with fakes that "hear" tone-coded words in the mel they are sent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from fakes import LABEL_FREQS, SR, EnergyVad, SpanVad, Spoken, ToneRecognizer, label_of, synth, tone_encode

from streamwhisper.errors import AudioFormatError, ConfigError
from streamwhisper.events import Event, Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord, RecognitionRequest
from streamwhisper.runtime.replay import drive
from streamwhisper.streaming.config import PolicyConfig, StreamingConfig
from streamwhisper.streaming.streamer import Streamer

MAX_RING = 30 * SR


def check_stream(events: Sequence[Event], spoken: Sequence[Spoken], tolerance: float = 0.06) -> None:
    """Finals are append-only, complete and in time; seq and VAD events are well formed."""
    seqs = [e.seq for e in events if isinstance(e, (Partial, Final))]
    assert seqs == list(range(len(seqs)))
    finals = [e for e in events if isinstance(e, Final)]
    words = [w for f in finals for w in f.words]
    assert [label_of(w.word) for w in words] == [s.label for s in spoken]  # none lost or repeated
    for w, s in zip(words, spoken, strict=True):
        assert abs(w.start - s.start) <= tolerance and abs(w.end - s.end) <= tolerance, (w, s)
    assert all(a.end <= b.start for a, b in pairwise(words))
    assert all(f.start <= f.end for f in finals)
    vad = [type(e) for e in events if isinstance(e, (SpeechStarted, SpeechEnded))]
    assert vad == [SpeechStarted, SpeechEnded] * (len(vad) // 2)
    times = [e.time for e in events if isinstance(e, (SpeechStarted, SpeechEnded))]
    assert times == sorted(times)
    assert finals[-1].endpoint


def feed_all(
    streamer: Streamer,
    recognizer: ToneRecognizer,
    audio: np.ndarray,
    sizes: Sequence[int],
    lag: int = 0,
) -> list[Event]:
    """Feed in the given chunk sizes; each request completes ``lag`` chunks after it was taken."""
    events: list[Event] = []
    taken: list[tuple[int, RecognitionRequest]] = []
    pos = i = 0
    while pos < audio.shape[0]:
        size = sizes[i % len(sizes)]
        events += streamer.feed(audio[pos : pos + size])
        assert streamer.audio.buffered_samples <= MAX_RING
        pos, i = pos + size, i + 1
        if taken and i - taken[0][0] >= lag:
            events += streamer.complete(recognizer.recognize([taken.pop()[1]])[0])
        if (request := streamer.pending_request()) is not None:
            assert streamer.pending_request() is None  # one outstanding request at a time
            taken.append((i, request))
    if taken:
        events += streamer.complete(recognizer.recognize([taken.pop()[1]])[0])
    events += streamer.flush()
    while (request := streamer.pending_request()) is not None:
        events += streamer.complete(recognizer.recognize([request])[0])
    assert streamer.finished
    return events


@pytest.mark.parametrize("trim_after_s", [0.0, 8.0])
def test_five_minutes_of_speech_nothing_lost_or_duplicated(trim_after_s: float) -> None:
    """Trim at every commit (0) or keep committed words as a forced prefix up to 8 s (default)."""
    audio, spoken = synth(300.0, seed=1, continuous=(100.0, 170.0))
    recognizer = ToneRecognizer()
    bare = trim_after_s == 0  # no committed words in a window: no carry over pauses either
    config = StreamingConfig(
        trim_after_s=trim_after_s, trim_keep_s=0.0 if bare else 3.0, carry_gap_s=0.0 if bare else 3.0
    )
    streamer = Streamer(config, vad=EnergyVad(), key="session-1")
    events = feed_all(streamer, recognizer, audio, [1_600])
    check_stream(events, spoken)
    assert sum(isinstance(e, SpeechEnded) for e in events) >= 10
    for r in recognizer.requests:
        assert r.key == "session-1" and r.mel.shape[0] == 80 and 0 < r.mel.shape[1] <= 3_000
    # Agreement keeps the window short even in the 70 s without a pause: at most trim_after_s
    # plus the step (and a chunk) once agreement commits, less than 8 s when trimming at once.
    limit = 800 if trim_after_s == 0 else round((trim_after_s + config.min_step_s + 0.1) * 100)
    assert max(r.mel.shape[1] for r in recognizer.requests) <= limit
    # Requests are conditioned on the last committed words (at most max_prompt_tokens); the prompt
    # and the forced prefix (the committed words in the window) are consecutive spoken words.
    labels = "".join(chr(65 + s.label) for s in spoken)
    assert max(len(r.prompt) for r in recognizer.requests) == StreamingConfig().policy.max_prompt_tokens
    assert all("".join(chr(65 + t) for t in r.prompt + r.prefix) in labels for r in recognizer.requests)
    prefixed = sum(bool(r.prefix) for r in recognizer.requests)
    if trim_after_s == 0:
        assert prefixed == 0
    else:  # requests carry committed words once an utterance has commits (121 of 291 here)
        assert prefixed > len(recognizer.requests) // 4


# Windows trimmed at every commit, so never holding committed words: no forced prefix.
TRIM_AT_COMMIT = StreamingConfig(trim_after_s=0.0, trim_keep_s=0.0, carry_gap_s=0.0)


@pytest.mark.parametrize("prefix", [False, True], ids=["trim-at-commit", "prefix"])
@pytest.mark.parametrize(("sizes", "lag"), [([137, 4_000, 16_000, 801], 0), ([8_000], 3), ([3_200, 12_345], 2)])
def test_chunking_and_slow_completion_do_not_change_the_transcript(sizes: list[int], lag: int, prefix: bool) -> None:
    """Trimmed at every commit, the window re-hears the end of the committed words and the
    policy drops them; kept in the window, they are sent as the forced prefix."""
    audio, spoken = synth(90.0, seed=2, continuous=(20.0, 60.0))
    recognizer = ToneRecognizer()
    streamer = Streamer(None if prefix else TRIM_AT_COMMIT, vad=EnergyVad())
    events = feed_all(streamer, recognizer, audio, sizes, lag=lag)
    check_stream(events, spoken)
    assert any(r.prefix for r in recognizer.requests) == prefix


@pytest.mark.parametrize("prefix", [False, True], ids=["trim-at-commit", "prefix"])
def test_window_limit_forces_commits_in_continuous_speech(prefix: bool) -> None:
    audio, spoken = synth(100.0, seed=3, continuous=(0.0, 100.0))
    recognizer = ToneRecognizer(unstable=True)
    config = TRIM_AT_COMMIT if not prefix else StreamingConfig()
    # only the window limit commits: no stall commits, and no word from one hypothesis
    config = replace(config, policy=PolicyConfig(stall_commit_s=0.0, sure_hypotheses=2))
    events = feed_all(Streamer(config, vad=EnergyVad()), recognizer, audio, [1_600])
    check_stream(events, spoken)
    finals = [e for e in events if isinstance(e, Final)]
    assert len(finals) >= 3 and not any(f.endpoint for f in finals[:-1])
    frames = [r.mel.shape[1] for r in recognizer.requests]
    assert 2_000 <= max(frames) <= 2_000 + 100  # force_commit_s (20 s) plus one step


def test_hypotheses_that_never_agree_commit_what_two_heard_stall_commit_s_before_the_end() -> None:
    # Each hypothesis names every word differently from the one before: only stall_commit_s commits
    # before the window limit, word by word as the latest hypothesis names them, none lost or twice.
    audio, spoken = synth(60.0, seed=3, continuous=(0.0, 60.0))
    recognizer = ToneRecognizer(unstable=True)
    events = feed_all(Streamer(vad=EnergyVad()), recognizer, audio, [1_600])
    check_stream(events, spoken)
    finals = [e for e in events if isinstance(e, Final)]
    assert len(finals) >= 20 and not any(f.endpoint for f in finals[:-1])
    # the windows are trimmed at trim_after_s (8 s): none grows to force_commit_s (20 s)
    assert max(r.mel.shape[1] for r in recognizer.requests) <= 1_200


def test_a_short_utterance_commits_only_at_its_endpoint() -> None:
    # 2.4 s of speech: every window is shorter than min_commit_window_s (3 s here).
    audio, spoken = synth(5.5, seed=6, continuous=(0.0, 5.5))
    assert 2.0 < spoken[-1].end - spoken[0].start < 3.0 - 0.3
    recognizer = ToneRecognizer()
    config = StreamingConfig(policy=PolicyConfig(min_commit_window_s=3.0))
    streamer = Streamer(config, vad=EnergyVad())
    events = feed_all(streamer, recognizer, audio, [1_600])
    check_stream(events, spoken)
    finals = [e for e in events if isinstance(e, Final)]
    assert len(finals) == 1 and finals[0].endpoint  # every word, at the endpoint
    assert sum(isinstance(e, Partial) for e in events) >= 2 and len(recognizer.requests) >= 3
    assert all(r.mel.shape[1] < 300 for r in recognizer.requests[:-1])  # the windows were short


def test_committed_words_stay_in_the_window_as_a_forced_prefix_until_it_is_trim_after_s_long() -> None:
    audio, spoken = synth(40.0, seed=5, continuous=(0.0, 40.0))
    recognizer = ToneRecognizer()
    config = StreamingConfig()
    assert config.trim_after_s == 8.0
    streamer = Streamer(config, vad=EnergyVad())
    committed: list[Word] = []
    # (window, request, words committed before it, audio fed when it completed)
    log: list[tuple[RecognitionRequest, RecognitionRequest, tuple[Word, ...], float]] = []
    events: list[Event] = []

    def serve() -> None:
        while (request := streamer.pending_request()) is not None:
            window, before = streamer.outstanding, tuple(committed)
            assert window is not None
            done = streamer.complete(recognizer.recognize([request])[0])
            committed.extend(w for e in done if isinstance(e, Final) for w in e.words)
            events.extend(done)
            log.append((window, recognizer.requests[-1], before, streamer.time))  # as encoded

    for i in range(0, audio.shape[0], 1_600):
        events.extend(streamer.feed(audio[i : i + 1_600]))
        serve()
    events.extend(streamer.flush())
    serve()
    check_stream(events, spoken)
    assert sum(isinstance(e, SpeechEnded) for e in events) == 1  # one long utterance

    for window, request, before, _ in log:
        # The prefix is exactly the committed words inside the window (none cut by its start),
        # the prompt the committed words before it.
        inside = [w for w in before if w.end > window.start]
        assert all(w.start >= window.start for w in inside)
        assert request.prefix == tuple(label_of(w.word) for w in inside)
        outside = [label_of(w.word) for w in before if w.end <= window.start]
        assert request.prompt == tuple(outside[-config.policy.max_prompt_tokens :])
        assert window.end - window.start <= config.trim_after_s + config.min_step_s + 0.1

    trims = 0
    for (a, _, _, fed), (b, request, before, _) in pairwise(log):
        # after the last committed word that leaves trim_keep_s of committed words after it,
        # half-way to the next one
        old = [i for i, w in enumerate(before) if w.end <= before[-1].end - config.trim_keep_s]
        cut = (before[old[-1]].end + before[old[-1] + 1].start) / 2 if old else 0.0
        if fed - a.start > config.trim_after_s and cut > a.start:
            # Past trim_after_s the window is trimmed there: the prefix keeps the last words.
            trims += 1
            assert b.start == pytest.approx(cut, abs=0.01) and request.prompt  # on a mel frame
            kept = [w for w in before if w.end > b.start]
            assert request.prefix == tuple(label_of(w.word) for w in kept)
            # the committed words after the cut span trim_keep_s: the last word before it ends
            # that long before the last committed word (the cut lies half-way to the next word)
            assert kept and before[-1].end - max(w.end for w in before if w.end <= b.start) >= config.trim_keep_s
        else:  # otherwise the window keeps its start and the committed words as the prefix
            assert b.start == a.start
    assert trims >= 3
    # Within a window the prefix grows as words are committed.
    assert max(len(r.prefix) for _, r, _, _ in log) >= 10


def test_overload_never_grows_the_ring() -> None:
    # Requests are taken but never completed for 50 s: the ring keeps the last 30 s only.
    audio, _ = synth(50.0, seed=4, continuous=(0.0, 50.0))
    streamer = Streamer(vad=EnergyVad())
    assert streamer.feed(audio[: 2 * SR]) and streamer.pending_request() is not None
    nbytes = streamer.audio.nbytes
    for i in range(2 * SR, audio.shape[0], SR):
        streamer.feed(audio[i : i + SR])
        assert streamer.pending_request() is None
        assert streamer.audio.buffered_samples <= MAX_RING
    assert streamer.audio.nbytes == nbytes
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    request = streamer.pending_request()
    assert request is not None and request.mel.shape[1] <= 3_000


# An utterance's first request after 0.5 s of it (the default waits 1.5 s): the endpoint tests
# below have utterances of about a second.
EARLY_FIRST = StreamingConfig(first_step_s=0.5)


def test_every_vad_endpoint_gets_its_endpoint_request() -> None:
    audio = np.zeros(6 * SR, dtype=np.float32)
    audio[int(0.5 * SR) : int(1.7 * SR)] = 0.3
    audio[int(2.4 * SR) : int(3.5 * SR)] = 0.3  # resumes 0.7 s later, after the VAD endpoint
    streamer = Streamer(EARLY_FIRST, vad=EnergyVad())
    streamer.feed(audio[: int(1.6 * SR)])
    assert streamer.pending_request() is not None
    # Speech ends and restarts while that request is outstanding (or within one chunk).
    events = streamer.feed(audio[int(1.6 * SR) : int(3.0 * SR)])
    assert [type(e) for e in events] == [SpeechEnded, SpeechStarted]
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    assert streamer.pending_request() is not None
    window = streamer.outstanding
    assert window is not None and window.endpoint and 2.2 <= window.end <= 2.3
    first_end = window.end
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    # The second utterance starts after the first one's window (its pre-roll is clipped).
    streamer.feed(audio[int(3.0 * SR) : int(3.4 * SR)])
    assert streamer.pending_request() is not None
    window = streamer.outstanding
    assert window is not None and not window.endpoint and window.start == first_end


def test_utterances_queued_behind_an_outstanding_request_stay_apart() -> None:
    audio = np.zeros(6 * SR, dtype=np.float32)
    audio[int(0.5 * SR) : int(1.7 * SR)] = 0.3
    audio[int(2.4 * SR) : int(2.8 * SR)] = 0.3
    audio[int(3.6 * SR) : int(3.9 * SR)] = 0.3
    streamer = Streamer(EARLY_FIRST, vad=EnergyVad())
    streamer.feed(audio[: int(1.6 * SR)])
    assert streamer.pending_request() is not None
    # Three utterances end while the first request is outstanding: the first keeps its own
    # endpoint; the second and third (one queued utterance at most) share one.
    events = streamer.feed(audio[int(1.6 * SR) : int(5.0 * SR)])
    assert [type(e) for e in events] == [SpeechEnded, SpeechStarted, SpeechEnded, SpeechStarted, SpeechEnded]
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    assert streamer.pending_request() is not None
    window = streamer.outstanding
    assert window is not None and window.endpoint and window.start == 0.18 and 2.1 < window.end < 2.4
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    assert streamer.pending_request() is not None
    window = streamer.outstanding
    assert window is not None and window.endpoint and 2.1 < window.start < 2.4 and window.end > 4.2
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    assert streamer.pending_request() is None and streamer.flush() == [] and streamer.finished


def test_finalize_forces_an_endpoint_and_speech_goes_on() -> None:
    audio = np.zeros(6 * SR, dtype=np.float32)
    audio[int(0.5 * SR) : int(4.0 * SR)] = 0.3
    streamer = Streamer(EARLY_FIRST, vad=EnergyVad())
    streamer.feed(audio[: int(1.6 * SR)])
    assert streamer.pending_request() is not None
    streamer.feed(audio[int(1.6 * SR) : int(2.0 * SR)])
    assert streamer.finalize() == []  # the endpoint waits for the outstanding request
    assert streamer.finalize() == []  # idempotent
    streamer.feed(audio[int(2.0 * SR) : int(3.0 * SR)])
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    assert streamer.pending_request() is not None
    window = streamer.outstanding
    assert window is not None and window.endpoint and window.end == 2.0
    streamer.complete(Hypothesis("", (), (), -0.2, 0.01, 1.0, "en"))
    streamer.feed(audio[int(3.0 * SR) :])
    assert streamer.pending_request() is not None
    window = streamer.outstanding
    # speech after the forced endpoint is a new utterance, from dedupe_window_s before it (so
    # that a word cut by the endpoint is heard whole)
    assert window is not None and window.start == 2.0 - StreamingConfig().policy.dedupe_window_s


def test_a_finalize_is_answered_by_an_endpoint_final_even_when_no_word_was_heard() -> None:
    """A voice agent waits for the final that answers its finalize: an utterance whose every
    hypothesis was empty (its words screened out) still gets its endpoint final, empty, whether
    the finalize ended it (in the pause after it) or came while the request of the VAD's endpoint
    was out (an agent's VAD slower than ours). Ended by the VAD alone, it ends without one (noise
    says nothing to a captioning client)."""
    audio = np.zeros(4 * SR, dtype=np.float32)
    audio[int(0.5 * SR) : int(2.0 * SR)] = 0.3
    empty = Hypothesis("", (), (), -0.2, 0.01, 1.0, "en")

    def finals(finalize: str) -> list[Final]:
        streamer = Streamer(EARLY_FIRST, vad=EnergyVad())
        events: list[Event] = []
        for chunk in np.split(audio, 40):  # 100 ms at a time, each request answered at once
            events += streamer.feed(chunk)
            if finalize == "in the pause" and streamer.time == 2.2:
                events += streamer.finalize()
            while (request := streamer.pending_request()) is not None:
                if finalize == "at the endpoint request" and request.endpoint:
                    events += streamer.finalize()
                events += streamer.complete(empty)
        assert streamer.utterances[0] == streamer.utterances[1] >= 1  # every utterance closed
        return [e for e in events if isinstance(e, Final)]

    for finalize in ("in the pause", "at the endpoint request"):
        answer = finals(finalize)
        assert [(f.text, f.words, f.endpoint) for f in answer] == [("", (), True)], finalize
        assert answer[0].end <= 2.6
    assert finals("never") == []


def test_request_protocol() -> None:
    streamer = Streamer(EARLY_FIRST, vad=EnergyVad())
    empty = Hypothesis("", (), (), -0.2, 0.01, 1.0, "en")
    with pytest.raises(RuntimeError):
        streamer.complete(empty)
    assert streamer.pending_request() is None and streamer.outstanding is None
    tone = np.full(SR, 0.3, dtype=np.float32)
    streamer.feed(tone[: SR // 4])
    assert streamer.pending_request() is None  # less than a step of speech
    streamer.feed(tone)
    request = streamer.pending_request()
    assert request is not None and request.mel.shape == (80, request.mel.shape[1])
    assert streamer.outstanding is not None and streamer.outstanding.start == 0.0
    assert streamer.abandon() == [] and streamer.outstanding is None
    assert streamer.pending_request() is not None  # the abandoned audio is asked for again
    with pytest.raises(ValueError):
        streamer.step_s = 0.4  # below min_step_s
    with pytest.raises(ValueError):
        streamer.step_s = 10.5  # the window could outgrow the ring
    streamer.step_s = 2.0
    assert streamer.step_s == 2.0
    streamer.flush()
    with pytest.raises(RuntimeError):
        streamer.feed(tone)


def test_the_recogniser_encodes_a_request_s_text() -> None:
    """The Streamer hands out text; token ids given by a caller go first, and of the prompt
    only the last max_prompt_tokens are kept."""
    words = " w3 w1 w4 w1 w5"
    request = RecognitionRequest(np.zeros((80, 10), np.float32), prompt=(9,), prompt_text=words, prefix_text=" w2 w6")
    encoded = request.with_tokens(tone_encode)
    assert (encoded.prompt, encoded.prefix) == ((9, 3, 1, 4, 1, 5), (2, 6))
    assert encoded.prompt_text == encoded.prefix_text == "" and encoded.max_prompt_tokens is None
    assert replace(request, max_prompt_tokens=3).with_tokens(tone_encode).prompt == (4, 1, 5)
    assert replace(request, max_prompt_tokens=0).with_tokens(tone_encode).prompt == ()
    assert replace(request, prompt_text="", max_prompt_tokens=3).with_tokens(tone_encode).prompt == (9,)


def test_endpoint_request_is_due_at_once_and_marks_the_final() -> None:
    audio = np.zeros(3 * SR, dtype=np.float32)
    audio[int(0.5 * SR) : int(1.0 * SR)] = 0.3  # 0.5 s of "speech": less than a step
    streamer = Streamer(StreamingConfig(min_step_s=2.0), vad=EnergyVad())
    recognizer = ToneRecognizer()
    events = drive(
        streamer,
        recognizer,
        [audio[i : i + 800] for i in range(0, audio.shape[0], 800)],
        flush=False,
    )
    assert len(recognizer.requests) == 1
    finals = [e for e in events if isinstance(e, Final)]
    assert len(finals) == 1 and finals[0].endpoint and finals[0].text == "w0"
    assert 0.45 <= finals[0].start <= 0.55 and 0.95 <= finals[0].end <= 1.05


def test_flush_finalises_speech_at_the_end_of_the_stream() -> None:
    audio = np.full(int(1.5 * SR), 0.3, dtype=np.float32)
    streamer = Streamer(vad=EnergyVad())
    events = drive(streamer, ToneRecognizer(), [audio])
    assert [type(e) for e in events] == [SpeechStarted, Partial, SpeechEnded, Final]
    assert events[-1].endpoint and streamer.finished  # type: ignore[union-attr]


def test_invalid_streaming_config() -> None:
    with pytest.raises(ConfigError):
        StreamingConfig(min_step_s=0.05)
    with pytest.raises(ConfigError):
        StreamingConfig(force_commit_s=25.0, min_step_s=6.0)
    with pytest.raises(ConfigError):
        StreamingConfig(n_mels=64)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(10, dtype=np.int16),
        np.zeros((2, 10), dtype=np.float32),
        np.array([0.0, np.nan], dtype=np.float32),
    ],
)
def test_bad_samples_are_refused(bad: np.ndarray) -> None:
    with pytest.raises(AudioFormatError):
        Streamer(vad=EnergyVad()).feed(bad)


class SilentThenSpeaking:
    """Hears nothing for its first ``silent`` requests, then one word filling each window."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.ends: list[float] = []  # each request's window length, seconds

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        out = []
        for r in requests:
            seconds = r.mel.shape[-1] / 100
            self.ends.append(seconds)
            words = () if len(self.ends) <= self.silent else (HypothesisWord(" word", 0.0, seconds, 0.95),)
            text = "".join(w.word for w in words)
            fields = dict(avg_logprob=-0.2, no_speech_prob=0.01, compression_ratio=1.2, language="en")
            out.append(Hypothesis(text, (), words, **fields))  # type: ignore[arg-type]
        return out


@pytest.mark.parametrize("silent", [100, 6])
def test_wordless_hypotheses_space_out_the_requests(silent: int) -> None:
    """Music the VAD lets through: after wordless_after empty hypotheses, one request per
    wordless_step_s; the first hypothesis with words brings back the normal step."""
    audio = np.full(16 * SR, 0.3, dtype=np.float32)  # "speech" to the VAD all along
    config = StreamingConfig(wordless_after=4, wordless_step_s=2.0, trim_after_s=30.0)
    recognizer = SilentThenSpeaking(silent)
    chunks = [audio[i : i + 1600] for i in range(0, audio.shape[0], 1600)]
    drive(Streamer(config, vad=EnergyVad()), recognizer, chunks, flush=False)
    steps = [round(b - a, 1) for a, b in pairwise(recognizer.ends)]
    assert steps[:3] == [0.5, 0.5, 0.5]  # four wordless hypotheses (at 1.5 s, then every 0.5)...
    if silent == 100:
        assert set(steps[3:]) == {2.0} and len(steps) >= 9  # ...then every 2 s
    else:
        # the 5th to 7th requests 2 s apart; the 7th has words: the next ones 0.5 s apart again
        assert steps[3:7] == [2.0, 2.0, 2.0, 0.5] and set(steps[7:]) == {0.5}


@pytest.mark.parametrize("min_commit", [2.0, 3.0])
def test_partial_only_requests_wait_for_the_early_step(min_commit: float) -> None:
    """Before an utterance can commit, only the hypothesis the first commit agrees with is
    needed: after the first request the others wait for early_step_s, and a first step of
    1.5 s makes the first request the one the first commit agrees with. Same finals, fewer
    requests."""
    audio, spoken = synth(60.0, seed=7, continuous=(10.0, 25.0))
    windows: dict[str, list[float]] = {}
    finals: dict[str, list[str]] = {}
    variants = {"every step": (0.5, 0.5), "early step": (0.5, 1.0), "late first": (1.5, 1.0)}
    for name, (first, early) in variants.items():
        policy = PolicyConfig(min_commit_window_s=min_commit)
        config = StreamingConfig(first_step_s=first, early_step_s=early, pause_hold_ms=0, policy=policy)
        recognizer = ToneRecognizer()
        streamer = Streamer(config, vad=EnergyVad())
        events = feed_all(streamer, recognizer, audio, [1_600])
        check_stream(events, spoken)
        finals[name] = [w.word for e in events if isinstance(e, Final) for w in e.words]
        windows[name] = [r.mel.shape[1] / 100 for r in recognizer.requests]
    assert finals["early step"] == finals["every step"] == finals["late first"]
    assert len(windows["late first"]) < len(windows["early step"]) < len(windows["every step"])
    # the first utterance: early steps until the next window can commit, then 0.5 s steps
    steps = {name: [round(b - a, 1) for a, b in pairwise(w[:5])] for name, w in windows.items()}
    assert steps["early step"] == ([1.0, 0.5, 0.5, 0.5] if min_commit == 2.0 else [1.0, 1.0, 0.5, 0.5])
    assert steps["every step"] == [0.5, 0.5, 0.5, 0.5]
    # a late first request: a first window of 1.5 s (the pre-roll included), then 0.5 s steps
    assert windows["late first"][0] == pytest.approx(1.5, abs=0.1) and set(steps["late first"][1:]) == {0.5}


@pytest.mark.parametrize("hold_ms", [0, 150])
def test_no_request_in_a_pause_until_speech_resumes(hold_ms: int) -> None:
    """A 0.45 s pause (shorter than the 0.5 s endpoint): with pause_hold_ms, no window ends
    more than pause_hold_ms (and a frame and a chunk) into it; the words come out the same."""
    audio = np.zeros(8 * SR, dtype=np.float32)
    audio[int(0.5 * SR) : int(3.0 * SR)] = 0.3
    audio[int(3.45 * SR) : int(6.0 * SR)] = 0.3
    config = StreamingConfig(pause_hold_ms=hold_ms, trim_after_s=30.0)
    streamer = Streamer(config, vad=EnergyVad())
    recognizer = SilentThenSpeaking(0)
    ends: list[float] = []
    events: list[Event] = []
    for i in range(0, audio.shape[0], 1600):
        events += streamer.feed(audio[i : i + 1600])
        while (request := streamer.pending_request()) is not None:
            window = streamer.outstanding
            assert window is not None
            ends.append(window.end)
            events += streamer.complete(recognizer.recognize([request])[0])
    in_pause = [e for e in ends if 3.0 + (hold_ms + 30) / 1000 + 0.1 < e < 3.45]
    assert bool(in_pause) == (hold_ms == 0), ends
    assert sum(isinstance(e, SpeechEnded) for e in events) == 1  # one utterance: the pause is inside it


def tone_words(seconds: float, words: Sequence[tuple[int, float, float]]) -> tuple[np.ndarray, list[Spoken]]:
    """Tone-coded words (label, start s, end s) in silence."""
    audio = np.zeros(int(seconds * SR), dtype=np.float32)
    for label, start, end in words:
        a, b = round(start * SR), round(end * SR)
        n = np.arange(b - a)
        fade = np.minimum(1.0, np.minimum(n, b - a - n) / 160)
        audio[a:b] = 0.3 * fade * np.sin(2 * np.pi * LABEL_FREQS[label] * n / SR)
    return audio, [Spoken(label, start, end) for label, start, end in words]


def test_an_utterance_soon_after_another_reopens_the_words_before_it() -> None:
    """Within carry_gap_s of the last committed word, a new utterance's windows start back over
    the committed words of the last carry_keep_s (the pause included), which it hears again (as the
    forced prefix, after the committed words before them as the prompt, with reopened_prefix);
    after a longer pause it starts alone, and the ring keeps only the pre-roll again."""
    first = [(i % 20, 0.5 + 0.45 * i, 0.8 + 0.45 * i) for i in range(8)]  # 0.5 .. 3.95 s
    audio, spoken = tone_words(16.0, [*first, (21, 5.3, 5.6), (22, 5.7, 6.0), (23, 12.5, 12.8), (3, 12.9, 13.2)])
    carry = StreamingConfig()
    for reopened_prefix in (False, True):
        recognizer = ToneRecognizer()
        config = replace(carry, policy=replace(carry.policy, reopened_prefix=reopened_prefix))
        streamer = Streamer(config, vad=EnergyVad())
        events = feed_all(streamer, recognizer, audio, [1_600])
        check_stream(events, spoken)
        second = next(r for r in recognizer.requests if r.end > 5.6)
        assert second.urgent and second.start < 3.95 - carry.carry_keep_s + 0.5
        carried = [s.label for s in spoken[:8] if s.end > second.start]
        assert 4 <= len(carried) <= 7
        if reopened_prefix:  # the words before them as the prompt, the carried ones as the prefix
            assert list(second.prompt) == [s.label for s in spoken[: 8 - len(carried)]]
            assert list(second.prefix) == carried
        else:  # heard again without a prompt that breaks off before them
            assert second.prompt == () and second.prefix == ()
    third = next(r for r in recognizer.requests if r.end > 12.8)
    assert third.start > 11.5 and third.prefix == ()  # 6.5 s after the last word: no carry

    quiet = Streamer(vad=EnergyVad())
    feed_all(quiet, ToneRecognizer(), audio[: int(10.5 * SR)], [1_600])
    keep = carry.vad.pre_roll_ms + carry.vad.start_window_ms + 2 * carry.vad.frame_ms
    assert quiet.audio.buffered_samples <= keep * SR // 1000 + 1_600  # past the gap: the pre-roll only


class EndsAtLongSilence(ToneRecognizer):
    """Whisper ending its text at a long silence in the window: words after the window's first
    gap of more than a second are not heard (the carried words end the decoding)."""

    def _hear(self, request: RecognitionRequest) -> Hypothesis:
        heard = super()._hear(replace(request, prefix=()))
        self.requests[-1] = request
        words = list(heard.words)
        cut = next((i for i in range(1, len(words)) if words[i].start - words[i - 1].end > 1.0), len(words))
        words = words[len(request.prefix) : cut]
        return replace(heard, text="".join(w.word for w in words), words=tuple(words))


# Two sentences, 2 s apart: eight tone-coded words, then six.
FIRST = [(i, 0.5 + 0.45 * i, 0.8 + 0.45 * i) for i in range(8)]  # 0.5 .. 3.95 s
SECOND = [(10 + i, 6.0 + 0.45 * i, 6.3 + 0.45 * i) for i in range(6)]  # 6.0 .. 8.55 s


def test_a_carried_window_that_hears_nothing_new_reopens_at_the_utterance() -> None:
    """An utterance 2 s after the last one carries its words (carry_gap_s); when the decoder ends
    its text at them (heard again, then as the forced prefix), the window starts at the
    utterance's own audio and its words are heard. Without that (uncarry_after_s = 0), the
    whole utterance is lost."""
    audio, spoken = tone_words(11.0, [*FIRST, *SECOND])
    for uncarry_after_s in (1.0, 0.0):
        recognizer = EndsAtLongSilence()
        streamer = Streamer(StreamingConfig(uncarry_after_s=uncarry_after_s), vad=EnergyVad())
        events = feed_all(streamer, recognizer, audio, [1_600])
        carried = [r for r in recognizer.requests if r.start < 5.0 and r.end > 6.5]
        assert carried and carried[0].prefix == ()  # heard again first, then as the prefix
        finals = [label_of(w.word) for e in events if isinstance(e, Final) for w in e.words]
        if uncarry_after_s:
            check_stream(events, spoken)
            assert any(r.prefix for r in carried)
            assert all(r.start > 5.0 for r in recognizer.requests if r.start > carried[-1].start)
        else:
            assert finals == [label for label, _, _ in FIRST]  # the second utterance was never heard


class HissIsNoWord(EndsAtLongSilence):
    """... and hears no word in a hiss (a burst longer than a second)."""

    def _hear(self, request: RecognitionRequest) -> Hypothesis:
        heard = ToneRecognizer._hear(self, replace(request, prefix=()))
        self.requests[-1] = request
        words = [w for w in heard.words if w.end - w.start < 1.0]
        cut = next((i for i in range(1, len(words)) if words[i].start - words[i - 1].end > 1.0), len(words))
        words = words[len(request.prefix) : cut]
        return replace(heard, text="".join(w.word for w in words), words=tuple(words))


def words_hiss_words() -> tuple[np.ndarray, list[Spoken]]:
    """FIRST, a hiss that the VAD takes for speech (4.0-5.9 s: one utterance), SECOND."""
    audio, spoken = tone_words(11.0, [*FIRST, *SECOND])
    hiss = slice(int(4.0 * SR), int(5.9 * SR))
    audio[hiss] = np.random.default_rng(0).normal(0.0, 0.02, hiss.stop - hiss.start).astype(np.float32)
    return audio, spoken


def test_a_window_inside_an_utterance_that_hears_nothing_new_after_its_prefix_loses_no_word() -> None:
    """Once the first words are committed, a window holding them is decoded after them (the forced
    prefix) and the decoder ends its text there, at the hiss: with uncarry_after_s of audio after
    the commit point, the windows start at the commit point and the words after the hiss are heard
    (8 s of Apollo 11's radio in ``hard`` were lost so). With uncarry_after_s = 0 they are lost."""
    audio, spoken = words_hiss_words()
    for uncarry_after_s in (1.0, 0.0):
        recognizer = HissIsNoWord()
        events = feed_all(
            Streamer(StreamingConfig(uncarry_after_s=uncarry_after_s), vad=EnergyVad()), recognizer, audio, [1_600]
        )
        assert sum(isinstance(e, SpeechEnded) for e in events) == 1, "one utterance: the hiss is inside it"
        if uncarry_after_s:
            check_stream(events, spoken)
            gave_way = [r for r in recognizer.requests if 3.9 < r.start < 4.5]  # at the commit point
            assert gave_way and not gave_way[0].prefix
        else:
            finals = [label_of(w.word) for e in events if isinstance(e, Final) for w in e.words]
            assert finals == [label for label, _, _ in FIRST]


class CopiesItsPromptOnHiss(HissIsNoWord):
    """... and a window without a prefix that opens on the hiss starts with three words of its
    prompt, not its last ones (which the committed tail's dedupe drops): on the music after "Feels
    like these days go on forever." in conversation_tune, "A4 said Guttenberg Bible.", committed
    17 s before."""

    def _hear(self, request: RecognitionRequest) -> Hypothesis:
        heard = super()._hear(request)
        if request.prefix or not 3.9 < request.start < 5.9:
            return heard
        copied = request.prompt[-6:-3]  # (the prompt's tokens: one per word)
        copy = tuple(HypothesisWord(f" w{label}", 0.1 * i, 0.1 * i + 0.1, 0.6) for i, label in enumerate(copied))
        return replace(heard, text="".join(w.word for w in copy + heard.words), words=copy + heard.words)


def test_a_window_that_gave_way_drops_a_copy_of_its_prompt() -> None:
    audio, spoken = words_hiss_words()
    for copy_min_words in (3, 0):
        recognizer = CopiesItsPromptOnHiss()
        cfg = StreamingConfig(policy=PolicyConfig(restart_copy_min_words=copy_min_words))
        events = feed_all(Streamer(cfg, vad=EnergyVad()), recognizer, audio, [1_600])
        assert any(not r.prefix and 3.9 < r.start < 4.5 for r in recognizer.requests), "a window gave way"
        finals = [label_of(w.word) for e in events if isinstance(e, Final) for w in e.words]
        if copy_min_words:
            check_stream(events, spoken)
        else:
            assert finals[:11] == [*range(8), 2, 3, 4]  # the copy is final


class DoubtsOnce(ToneRecognizer):
    """Hears every word, but the first window decoded after a forced prefix that holds ``after``
    seconds of audio after it mishears its new words, at probability 0.1 (as "Suviacol," after
    "Suviacos."): screened out as doubtful."""

    def __init__(self, after: float) -> None:
        super().__init__()
        self.after = after
        self.doubted: RecognitionRequest | None = None

    def _hear(self, request: RecognitionRequest) -> Hypothesis:
        heard = super()._hear(replace(request, prefix=()))
        self.requests[-1] = request
        n = len(request.prefix)
        words = heard.words[n:]
        if n and words and self.doubted is None and request.end - request.start - heard.words[n - 1].end >= self.after:
            self.doubted = request
            words = tuple(replace(w, word=f"{w.word}x", probability=0.1) for w in words)
        return replace(heard, text="".join(w.word for w in words), words=words)


def test_a_window_whose_new_words_are_doubted_keeps_its_prefix() -> None:
    """Words said but screened out as doubtful are not words unheard: the window keeps its prefix
    and the next one hears them (giving way to the commit point there lost "Subiaco near Rome" in
    conversation_test: the window that followed began mid-word)."""
    audio, spoken = tone_words(8.0, [(i % 12, 0.5 + 0.45 * i, 0.8 + 0.45 * i) for i in range(14)])
    cfg = StreamingConfig(uncarry_after_s=0.5)
    recognizer = DoubtsOnce(after=cfg.uncarry_after_s)
    check_stream(feed_all(Streamer(cfg, vad=EnergyVad()), recognizer, audio, [1_600]), spoken)
    assert recognizer.doubted is not None
    after = recognizer.requests[next(i for i, r in enumerate(recognizer.requests) if r is recognizer.doubted) + 1]
    assert after.prefix and after.start == recognizer.doubted.start


def test_a_carried_endpoint_window_that_hears_nothing_new_is_decoded_again_from_the_utterance() -> None:
    """With a slow worker (each request back 2 s later) the first window to hold all of an
    utterance 2 s after the last one is its endpoint's, carried and decoded after the carried
    words; when the decoder ends its text at them, the utterance stays open and its endpoint is
    decoded again from its own audio. Closed at once, it lost the whole sentence (seen on a
    loaded node: tests/test_deploy.py)."""
    audio, spoken = tone_words(12.0, [*FIRST, *SECOND])
    recognizer = EndsAtLongSilence()
    streamer = Streamer(vad=EnergyVad())
    check_stream(feed_all(streamer, recognizer, audio, [1_600], lag=20), spoken)
    endpoints = [r for r in recognizer.requests if r.endpoint and r.end > 8.55]
    assert len(endpoints) == 2 and endpoints[0].start < 5.0 < endpoints[1].start, endpoints
    assert endpoints[0].prefix and not endpoints[1].prefix  # carried, then the utterance's own
    assert streamer.utterances == (2, 2)


def test_the_hypothesis_of_a_pause_ends_the_utterance_when_the_vad_does() -> None:
    """Once the VAD hears pause_hold_ms of quiet, one (urgent) request covers the speech before
    it; if the endpoint follows, that hypothesis's words are the endpoint final at once, with no
    request of its own. If speech resumes first, the utterance goes on as before."""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(6)]  # 0.5 .. 2.8 s
    resumed = [(10, 3.1, 3.4), (11, 3.5, 3.8)]  # after a 0.3 s pause
    audio, spoken = tone_words(6.0, [*words, *resumed])
    recognizer = ToneRecognizer()
    streamer = Streamer(vad=EnergyVad())
    events: list[Event] = []
    for i in range(0, audio.shape[0], 480):
        events += streamer.feed(audio[i : i + 480])
        while (request := streamer.pending_request()) is not None:
            events += streamer.complete(recognizer.recognize([request])[0])
        if any(isinstance(e, SpeechEnded) for e in events):
            break
    check_stream(events, spoken)
    urgent = [(r.start, r.end) for r in recognizer.requests if r.urgent]
    hold = StreamingConfig().pause_hold_ms / 1000
    # one request in the pause after 2.8 s (speech resumed) and one after 3.8 s, which ended it
    assert [end for _, end in urgent] == [pytest.approx(t + hold, abs=0.05) for t in (2.8, 3.8)]
    assert not any(r.endpoint for r in recognizer.requests)
    final = [e for e in events if isinstance(e, Final)][-1]
    assert final.endpoint and final.words[-1].word.strip() == "w11"
    ended = next(e for e in events if isinstance(e, SpeechEnded))
    assert events.index(final) > events.index(ended)  # the final came with the VAD's endpoint


def test_an_endpoint_the_pause_request_did_not_reach_gets_its_own_request() -> None:
    """A recogniser slower than the endpoint: the request in flight when the pause began did not
    hear the speech to its end, so the endpoint has its own request."""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(6)]
    audio, spoken = tone_words(5.0, words)
    recognizer = ToneRecognizer()
    streamer = Streamer(vad=EnergyVad())
    events = feed_all(streamer, recognizer, audio, [480], lag=40)  # 1.2 s per request
    check_stream(events, spoken)
    assert recognizer.requests[-1].endpoint and recognizer.requests[-1].urgent


def test_a_finalize_in_a_pause_keeps_a_request_that_reached_into_it() -> None:
    """A request whose window ends 80 ms after the last voiced frame (past half the 150 ms hold)
    heard the speech to its end: a finalize in the pause keeps it for the endpoint final. The
    speech ends at the VAD's last voiced frame; the audio's end less the VAD's quiet lies up to a
    frame later (the VAD has not classified the last partial frame), which withdrew it."""
    streamer = Streamer(vad=SpanVad([(0.0, 1.98)]))
    audio = np.zeros(3 * SR, np.float32)
    recognizer, held, pos = ToneRecognizer(), None, 0
    while streamer.audio.end < 2.2 * SR:  # 1100-sample messages
        streamer.feed(audio[pos : pos + 1_100])
        pos += 1_100
        if held is None and (request := streamer.pending_request()) is not None:
            if request.end > 1.98:
                held = request  # out when the finalize comes
            else:
                streamer.complete(recognizer.recognize([request])[0])
    assert held is not None and 1.98 + 0.075 <= held.end < 1.98 + 0.1, held
    assert streamer.speaking  # in the pause: 0.2 s of quiet, short of the 0.5 s endpoint
    streamer.finalize()
    assert not streamer.superseded and streamer.awaited
    events = streamer.complete(recognizer.recognize([held])[0])
    assert any(isinstance(e, Final) and e.endpoint for e in events)
    assert streamer.pending_request() is None, "no endpoint request of its own"


def test_finalize_in_a_pause_uses_the_pause_hypothesis_at_once() -> None:
    """A client's finalize once the VAD heard pause_hold_ms of quiet (Pipecat's own VAD stopped):
    the pause's hypothesis heard the speech to its end, so finalize returns the endpoint final
    itself, with no request; speech resuming later is a new utterance, nothing lost."""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(6)]  # 0.5 .. 2.8 s
    audio, spoken = tone_words(8.0, [*words, (10, 3.6, 3.9), (11, 4.0, 4.3)])
    recognizer = ToneRecognizer()
    streamer = Streamer(vad=EnergyVad())
    events: list[Event] = []

    def serve() -> None:
        nonlocal events
        while (request := streamer.pending_request()) is not None:
            events += streamer.complete(recognizer.recognize([request])[0])

    pos = 0
    while pos < 3.1 * SR:  # 0.3 s into the pause
        events += streamer.feed(audio[pos : pos + 480])
        pos += 480
        serve()
    asked = len(recognizer.requests)
    done = streamer.finalize()
    events += done
    finals = [e for e in done if isinstance(e, Final)]
    assert len(finals) == 1 and finals[0].endpoint and finals[0].words[-1].word.strip() == "w5"
    assert len(recognizer.requests) == asked and streamer.pending_request() is None
    while pos < audio.shape[0]:
        events += streamer.feed(audio[pos : pos + 480])
        pos += 480
        serve()
    events += streamer.flush()
    serve()
    check_stream(events, spoken)


class StopsEarlyAtPauses(ToneRecognizer):
    """Hears the tones, except that the decoding of a window that ends in quiet (not the
    endpoint's) stops before its last ``dropped`` words, as Whisper's may at a window's end;
    ``unstable``: hypotheses never agree, so the words stay pending until the pause.
    ``deaf_endpoint``: an endpoint window hears nothing it keeps (its words all screened out, as
    "Word.:0.36 Word.:0.40" on noise in conversation_test_2)."""

    def __init__(self, dropped: int = 3, unstable: bool = True, deaf_endpoint: bool = False) -> None:
        super().__init__(unstable=unstable)
        self.dropped, self.deaf_endpoint = dropped, deaf_endpoint

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        out = []
        for r, h in zip(requests, super().recognize(requests), strict=True):
            quiet = bool(h.words) and h.words[-1].end < r.end - r.start - 0.1
            if r.endpoint:
                words = () if self.deaf_endpoint else h.words
            else:
                words = h.words[: -self.dropped] if quiet else h.words
            out.append(replace(h, words=words))
        return out


def test_a_pause_hypothesis_that_stopped_before_the_speech_did_leaves_the_endpoint_its_own_request() -> None:
    """LJ001-0003 streamed at a slow cadence: the pause's decoding stopped at "the wood cutters",
    2.6 s before the speech ended, and the utterance closed on it; the next one began too late to
    hear that audio again, and "of the Netherlands by a similar process" was lost. Its words end
    1.2 s before the speech here (more than pause_unheard_s): the endpoint has its own request and
    no word is lost. (With pause_unheard_s=10, "w3 w4 w5" are lost.)"""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(6)]  # 0.5 .. 2.8 s
    audio, spoken = tone_words(9.0, [*words, (10, 7.5, 7.8), (11, 7.9, 8.2)])  # 4.7 s later: not carried
    recognizer = StopsEarlyAtPauses()
    events = feed_all(Streamer(vad=EnergyVad()), recognizer, audio, [480])
    check_stream(events, spoken)
    assert [r.endpoint for r in recognizer.requests if r.urgent and r.end < 4.0] == [False, True]


class StopsEarlyAfterContext(ToneRecognizer):
    """Hears the tones, doubting each word (probability 0.6), except that the decoding of a
    window that ends in quiet and holds a second of audio before its last two words stops before
    them, as Whisper's may when conditioned on the words before them (hard's cold clip: "...
    probably good." then "Alright, thanks." unsaid); a window of those two words alone hears
    them. Unstable, as :class:`StopsEarlyAtPauses`."""

    def __init__(self) -> None:
        super().__init__(unstable=True)

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        out = []
        for r, h in zip(requests, super().recognize(requests), strict=True):
            words = tuple(replace(w, probability=0.6) for w in h.words)
            if len(words) >= 2 and words[-1].end < r.end - r.start - 0.1 and words[-2].start > 1.0:
                words = words[:-2]
            out.append(replace(h, words=words))
        return out


@pytest.mark.parametrize("tail_unheard_s", [0.5, 0.0])
def test_a_pause_hypothesis_that_stopped_a_breath_early_leaves_the_rest_to_a_window_of_its_own(
    tail_unheard_s: float,
) -> None:
    """The pause's words end 0.8 s before the speech (within pause_unheard_s, so the utterance
    would close on them) and every window over the whole utterance stops there: one more request
    hears only the audio after them, prompted with them, and its words end the utterance. Without
    it (tail_unheard_s=0) "w4 w5" are lost."""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(6)]  # 0.5 .. 2.8 s
    audio, spoken = tone_words(5.0, words)
    recognizer = StopsEarlyAfterContext()
    config = StreamingConfig(tail_unheard_s=tail_unheard_s)
    events = feed_all(Streamer(config, vad=EnergyVad()), recognizer, audio, [480])
    finals = [label_of(w.word) for e in events if isinstance(e, Final) for w in e.words]
    if not tail_unheard_s:
        assert finals == [0, 1, 2, 3]
        return
    check_stream(events, spoken)
    tail = recognizer.requests[-1]
    assert tail.endpoint and not tail.prefix and tail.prompt  # after the words before it, as its prompt
    assert 2.0 - 0.15 < tail.start < 2.0


def test_a_window_of_the_rest_that_reaches_back_before_its_utterance_ends_it_once() -> None:
    """The first utterance closes at its pause on "w0 w1 w2"; w3 follows in its hangover, which
    the VAD calls quiet. The next utterance opens its window back over them, and its pause's
    hypothesis says w3 and stops before w4: the window of the rest starts just before w3's
    end, before the utterance's own audio. It is asked once and ends the utterance, though it
    hears nothing; asked as a carried endpoint window, the utterance stayed open and the same
    window was asked again and again (live, for 28 s of conversation_test_2, the ring overflowing)."""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(3)]  # 0.5 .. 1.6 s
    audio, _ = tone_words(5.0, [*words, (3, 1.85, 2.1), (4, 2.5, 2.9)])
    recognizer = StopsEarlyAtPauses(dropped=1, unstable=False, deaf_endpoint=True)
    streamer = Streamer(vad=SpanVad([(0.45, 1.65), (2.45, 2.95)]))
    events: list[Event] = []
    for pos in range(0, audio.shape[0], 480):
        events += streamer.feed(audio[pos : pos + 480])
        if (request := streamer.pending_request()) is not None:
            events += streamer.complete(recognizer.recognize([request])[0])
    events += streamer.flush()
    for _ in range(20):  # (a bound: the bug asked without end)
        if (request := streamer.pending_request()) is None:
            break
        events += streamer.complete(recognizer.recognize([request])[0])
    tails = [(r.start, r.end) for r in recognizer.requests if r.endpoint and not r.prefix]
    assert len(tails) == 1 and 1.9 < tails[0][0] < 2.1, tails
    assert streamer.finished
    assert [label_of(w.word) for e in events if isinstance(e, Final) for w in e.words] == [0, 1, 2, 3]


class DroppedAtPauses(ToneRecognizer):
    """Hears the tones, except that the hypothesis of a pause (urgent, not the endpoint) is one
    the policy drops (log-probability below its floor)."""

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        out = super().recognize(requests)
        paused = [r.urgent and not r.endpoint for r in requests]
        return [replace(h, avg_logprob=-3.0) if p else h for h, p in zip(out, paused, strict=True)]


def test_a_pause_hypothesis_without_words_leaves_the_endpoint_its_own_request() -> None:
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(4)]  # 0.5 .. 2.0 s
    audio, spoken = tone_words(4.0, words)
    recognizer = DroppedAtPauses()
    streamer = Streamer(vad=EnergyVad())
    events = feed_all(streamer, recognizer, audio, [480])
    check_stream(events, spoken)  # every word final, from the endpoint's own request
    assert [r.endpoint for r in recognizer.requests if r.urgent] == [False, True]


@pytest.mark.parametrize("lag", [0, 12])
def test_a_short_endpointing_makes_finals_at_pauses_and_the_utterance_goes_on(lag: int) -> None:
    """pause_final (a client's endpointing of 100 ms, shorter than the VAD's 500 ms): when the
    pause's hypothesis comes back while the speaker is still quiet, its words are an endpoint
    final at once, and the utterance goes on with them as its forced prefix. A hypothesis that
    comes back after speech resumed (lag: 12 chunks of 30 ms) makes no final at the pause."""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(6)]  # 0.5 .. 2.8 s
    resumed = [(10, 3.2, 3.5), (11, 3.6, 3.9)]  # after a 0.4 s pause
    audio, spoken = tone_words(6.0, [*words, *resumed])
    recognizer = ToneRecognizer()
    streamer = Streamer(StreamingConfig(pause_final=True, pause_hold_ms=100), vad=EnergyVad())
    events = feed_all(streamer, recognizer, audio, [480], lag=lag)
    check_stream(events, spoken)  # nothing lost or repeated
    assert sum(isinstance(e, SpeechEnded) for e in events) == 1, "one utterance: the pause is inside it"
    finals = [e for e in events if isinstance(e, Final) and e.words]
    at_pause = [f for f in finals if f.endpoint and f.words[-1].word.strip() == "w5"]
    assert len(at_pause) == (0 if lag else 1), finals
    if not lag:  # it came before the speech resumed, and the next window heard it as its prefix
        assert events.index(at_pause[0]) < next(i for i, e in enumerate(events) if isinstance(e, SpeechEnded))
        after = next(r for r in recognizer.requests if r.end > 3.5)
        assert 5 in after.prefix and after.start < 2.8
    assert finals[-1].endpoint and finals[-1].words[-1].word.strip() == "w11"


class DoubtedStopAtPauses(ToneRecognizer):
    """Hears the tones; a window cut at a pause (the pause's urgent request) ends its text with a
    full stop the decoder doubts (probability 0.5), as Whisper ends a window cut at a breath."""

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        out = super().recognize(requests)
        for i, (r, h) in enumerate(zip(requests, out, strict=True)):
            if r.urgent and not r.endpoint and h.words:
                last = replace(h.words[-1], word=h.words[-1].word + ".", mark_probability=0.5)
                out[i] = replace(h, words=(*h.words[:-1], last))
        return out


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("pause", [0.4, 1.5])
def test_a_pause_final_with_a_doubted_full_stop_waits_for_the_endpoint(pause: float, eager: bool) -> None:
    """pause_final: a pause whose hypothesis ends with a full stop the decoder doubts makes no
    final while the pause may still be a breath. When the speech resumes (a 0.4 s pause), the words
    go on with it; when the speaker stays quiet, the VAD's endpoint (500 ms) makes the final from
    that hypothesis, full stop kept, with no request of its own. ``eager_pause_finals`` (Flux's
    eager ends of turn) sends the final at the pause with the stop dropped, as before."""
    words = [(i, 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i in range(6)]  # 0.5 .. 2.8 s
    resumed = [(10, 2.8 + pause, 3.1 + pause), (11, 3.2 + pause, 3.5 + pause)]
    audio, spoken = tone_words(6.0 + pause, [*words, *resumed])
    recognizer = DoubtedStopAtPauses()
    config = StreamingConfig(pause_final=True, pause_hold_ms=100, eager_pause_finals=eager)
    events = feed_all(Streamer(config, vad=EnergyVad()), recognizer, audio, [480])
    check_stream(events, spoken)  # nothing lost or repeated
    finals = [e for e in events if isinstance(e, Final) and e.words]
    (w5,) = [f for f in finals if f.words[-1].word.strip().rstrip(".") == "w5"] or [None]
    if eager:
        assert w5 is not None and w5.endpoint and w5.words[-1].word == " w5", finals
    elif pause < 0.5:  # a breath: no final there, the stop is the next windows' to say
        assert w5 is None or not w5.endpoint, finals
    else:  # the endpoint's final, from the pause's hypothesis
        assert w5 is not None and w5.endpoint and w5.words[-1].word == " w5.", finals
        ended = [e for e in events if isinstance(e, SpeechEnded)]
        assert ended[0].time < 3.4 and events.index(w5) > events.index(ended[0])
        assert not any(r.endpoint and r.end < 2.8 + pause for r in recognizer.requests)


@pytest.mark.parametrize("lag", [0, 4, 8])
def test_a_request_made_inside_a_pause_before_its_own_makes_the_pause_final(lag: int) -> None:
    """pause_final: a regular request made 0.2 s into the pause (its step had come) hears all the
    speech before it; when it comes back with the speaker still quiet for pause_hold_ms, its words
    are the pause's endpoint final, as the pause's own request would have made them (none follows).
    Back sooner (lag 0: a fast recogniser), its words become that final once the pause is held."""
    words = [(i, 0.5 + 0.44 * i, 0.8 + 0.44 * i) for i in range(6)]  # the last ends at 3.0 s
    resumed = [(10, 3.9, 4.2), (11, 4.3, 4.6)]
    audio, spoken = tone_words(7.0, [*words, *resumed])
    recognizer = ToneRecognizer()
    streamer = Streamer(StreamingConfig(pause_final=True, pause_hold_ms=300), vad=EnergyVad())
    events = feed_all(streamer, recognizer, audio, [480], lag=lag)
    check_stream(events, spoken)
    in_pause = [r for r in recognizer.requests if 3.0 < r.end < 3.9]
    assert [r.urgent for r in in_pause] == [False], in_pause  # no request of the pause's own
    at_pause = [
        e for e in events if isinstance(e, Final) and e.endpoint and e.words and e.words[-1].word.strip() == "w5"
    ]
    assert len(at_pause) == 1 and events.index(at_pause[0]) < next(
        i for i, e in enumerate(events) if isinstance(e, SpeechEnded)
    )


class DoubtsShortWindows(ToneRecognizer):
    """Hears the tones, but doubts (probability 0.3) every word of a window holding at most two:
    a few words cut from their sentence, as at a session that starts mid-utterance ("Ask not!"),
    and gives such a window ``no_speech`` as its no-speech probability."""

    def __init__(self, no_speech: float = 0.2) -> None:
        super().__init__()
        self.no_speech = no_speech

    def _hear(self, request: RecognitionRequest) -> Hypothesis:
        heard = super()._hear(request)
        if len(heard.words) + len(request.prefix) > 2:
            return heard
        doubted = tuple(replace(w, probability=0.3) for w in heard.words)
        return replace(heard, words=doubted, no_speech_prob=self.no_speech)


@pytest.mark.parametrize("gap", [1.2, 4.5])
def test_words_doubted_alone_are_heard_again_with_the_next_utterance(gap: float) -> None:
    """An utterance of two words, alone in its windows, that the model doubts and does not call
    speech for sure (no_speech_prob 0.2) is dropped at its endpoint; an utterance starting within
    carry_gap_s after it opens its window back over them, and they are heard there, in context.
    After a longer pause they stay dropped (nothing there to tell them from a hallucination on
    noise), and the ring keeps only the pre-roll in between."""
    short = [(1, 0.5, 0.8), (2, 0.9, 1.2)]
    after = [(10 + i, 1.2 + gap + 0.45 * i, 1.5 + gap + 0.45 * i) for i in range(6)]
    audio, spoken = tone_words(9.0, [*short, *after])
    recognizer = DoubtsShortWindows()
    streamer = Streamer(vad=EnergyVad())
    events = feed_all(streamer, recognizer, audio, [480])
    ended = [i for i, e in enumerate(events) if isinstance(e, SpeechEnded)]
    assert len(ended) == 2 and not [e for e in events[: ended[0]] if isinstance(e, Final) and e.words]
    if gap < StreamingConfig().carry_gap_s:
        check_stream(events, spoken)  # none lost
        assert min(r.start for r in recognizer.requests if r.end > after[0][2]) < short[0][1]
    else:
        check_stream(events, spoken[len(short) :])
        assert min(r.start for r in recognizer.requests if r.end > after[0][2]) > short[-1][2]


def test_a_short_turn_doubted_alone_but_called_speech_is_final_at_its_endpoint() -> None:
    """The same two words after a long pause, the model sure the window is speech (no_speech_prob
    0.01): no later window hears them, so its endpoint hypothesis is their final."""
    short = [(1, 0.5, 0.8), (2, 0.9, 1.2)]
    after = [(10 + i, 5.7 + 0.45 * i, 6.0 + 0.45 * i) for i in range(6)]
    audio, spoken = tone_words(9.0, [*short, *after])
    events = feed_all(Streamer(vad=EnergyVad()), DoubtsShortWindows(no_speech=0.01), audio, [480])
    check_stream(events, spoken)  # none lost
    first = next(e for e in events if isinstance(e, Final) and e.words)
    assert first.endpoint and [label_of(w.word) for w in first.words] == [1, 2]
