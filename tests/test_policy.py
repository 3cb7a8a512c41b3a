"""Commit policy: guards, LocalAgreement-2, boundaries, prompts; golden streams end to end."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamwhisper.events import Event, Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord, RecognitionRequest
from streamwhisper.streaming.config import PolicyConfig, StreamingConfig
from streamwhisper.streaming.policy import CommitPolicy, find_loop, normalize_word, screen
from streamwhisper.streaming.streamer import Streamer, run_sync

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("STREAMWHISPER_REGEN_GOLDEN") == "1"

Spoken = tuple[str, float, float]  # a word with its absolute start and end (seconds)


def hyp(words: Sequence[Spoken], offset: float = 0.0, **kw: Any) -> Hypothesis:
    """A hypothesis whose words are given on the absolute clock of a window at ``offset``."""
    ws = tuple(HypothesisWord(w, round(s - offset, 3), round(e - offset, 3), 0.9) for w, s, e in words)
    fields: dict[str, Any] = dict(avg_logprob=-0.2, no_speech_prob=0.01, compression_ratio=1.2, language="en")
    fields.update(kw)
    return Hypothesis("".join(w.word for w in ws), (), ws, **fields)


def texts(events: Sequence[Event]) -> list[tuple[str, str]]:
    return [(type(e).__name__, e.text) for e in events if isinstance(e, (Partial, Final))]


def fake_encode(text: str) -> list[int]:
    return [len(w) for w in text.split()]  # one "token" per word


# --- pure helpers -----------------------------------------------------------------------------


def test_normalize_word() -> None:
    assert normalize_word(" Hello,") == "hello"
    assert normalize_word("Don't") == "dont"
    assert normalize_word(" ÇA!") == "ça"
    assert normalize_word(" ...") == ""
    assert normalize_word("你好。") == "你好"


@pytest.mark.parametrize(
    ("words", "cut"),
    [
        ("a b c d", None),
        ("no no no", None),  # three of a word is speech
        ("no no no no", 1),
        ("x thank you thank you thank you", 3),
        ("a b a b", None),
        ("i said a b c a b c a b c and", 5),
    ],
)
def test_find_loop(words: str, cut: int | None) -> None:
    assert find_loop(words.split(), max_ngram=8, min_repeats=3) == cut


def test_screen_rejects_silence_low_confidence_and_compression() -> None:
    cfg = PolicyConfig()
    words = [(" hi", 0.0, 0.3)]
    assert screen(hyp(words, no_speech_prob=0.9, avg_logprob=-1.2), cfg) == ((), "no_speech")
    # Confident text wins over a high no-speech probability (Whisper's rule needs both).
    assert screen(hyp(words, no_speech_prob=0.9, avg_logprob=-0.3), cfg)[1] == ""
    assert screen(hyp(words, avg_logprob=-1.6), cfg) == ((), "low_logprob")
    assert screen(hyp(words, compression_ratio=2.5), cfg) == ((), "compression_ratio")
    looped = [(" thank", 0.0, 0.2), (" you", 0.2, 0.4)] * 4
    kept, reason = screen(hyp(looped, compression_ratio=3.0), cfg)
    assert reason == "loop" and [w.word for w in kept] == [" thank", " you"]
    kept, _ = screen(hyp([(" hi", 0.0, 0.2), (" ...", 0.2, 0.3), (" there", 0.3, 0.5)]), cfg)
    assert [w.word for w in kept] == [" hi", " there"]


# --- CommitPolicy -----------------------------------------------------------------------------


def test_local_agreement_commits_the_confirmed_prefix() -> None:
    p = CommitPolicy(encode_text=fake_encode)
    e1 = p.observe(hyp([(" Hello", 0.4, 0.8), (" word", 0.8, 1.0)]), 0.0, 1.0)
    assert texts(e1) == [("Partial", "Hello word")]
    e2 = p.observe(hyp([(" hello,", 0.4, 0.8), (" world", 0.8, 1.2), (" how", 1.3, 1.5)]), 0.0, 2.0)
    assert texts(e2) == [("Final", "hello,"), ("Partial", "world how")]
    assert p.committed_end == 0.8 and p.prompt == (6,)
    # The next window starts at the commit point; "world how" is confirmed.
    e3 = p.observe(hyp([(" world", 0.8, 1.2), (" how", 1.3, 1.5), (" are", 1.5, 1.7)], 0.8), 0.8, 3.0)
    assert texts(e3) == [("Final", "world how"), ("Partial", "are")]
    seqs = [e.seq for e in e1 + e2 + e3 if isinstance(e, (Partial, Final))]
    assert seqs == list(range(len(seqs)))


def test_a_word_cut_by_the_window_end_waits() -> None:
    p = CommitPolicy()
    p.observe(hyp([(" ask", 1.0, 1.3), (" not", 1.3, 1.6)]), 0.0, 1.6)
    # Both agree, but " not" reaches the end of the window: it may be cut there.
    assert texts(p.observe(hyp([(" ask", 1.0, 1.3), (" not", 1.3, 1.98)]), 0.0, 2.0)) == [
        ("Final", "ask"),
        ("Partial", "not"),
    ]
    assert texts(p.observe(hyp([(" not", 1.3, 1.7)], 1.3), 1.3, 3.0)) == [("Final", "not")]


def test_unchanged_partial_is_not_repeated() -> None:
    p = CommitPolicy()
    assert texts(p.observe(hyp([(" a", 0.0, 0.5)]), 0.0, 1.0)) == [("Partial", "a")]
    assert texts(p.observe(hyp([(" b", 0.0, 0.5)]), 0.0, 2.0)) == [("Partial", "b")]
    assert p.observe(hyp([(" c", 0.0, 0.5)], no_speech_prob=0.99, avg_logprob=-2.0), 0.0, 3.0) == [
        Partial("", 0.0, 0.0, (), 2)
    ]
    assert p.observe(hyp([]), 0.0, 3.5) == []


def test_endpoint_finalises_the_rest() -> None:
    p = CommitPolicy()
    p.observe(hyp([(" one", 0.1, 0.4), (" two", 0.5, 0.8)]), 0.0, 1.0)
    p.observe(hyp([(" one", 0.1, 0.4), (" too", 0.5, 0.8)]), 0.0, 2.0)
    events = p.observe(hyp([(" two", 0.5, 0.8), (" three", 0.9, 1.3)], 0.4), 0.4, 2.5, endpoint=True)
    assert events == [
        Final(
            "two three",
            0.5,
            1.3,
            (Word(" two", 0.5, 0.8, 0.9), Word(" three", 0.9, 1.3, 0.9)),
            3,
            endpoint=True,
        )
    ]
    assert p.committed_end == 2.5
    # After an endpoint, nothing is de-duplicated: a new utterance may repeat the last word.
    assert texts(p.observe(hyp([(" three", 3.0, 3.3)], 2.9), 2.9, 4.0)) == [("Partial", "three")]


def test_endpoint_marks_an_utterance_even_when_everything_was_committed() -> None:
    p = CommitPolicy()
    p.observe(hyp([(" yes", 0.1, 0.4)]), 0.0, 1.0)
    p.observe(hyp([(" yes", 0.1, 0.4)]), 0.0, 2.0)  # committed by agreement
    assert p.close(2.6) == [Final("", 0.4, 0.4, (), 2, endpoint=True)]
    # An utterance without text ends silently; a partial left on screen is cleared.
    p.observe(hyp([(" hm", 3.0, 3.2)], 2.9), 2.9, 3.5)
    silence = hyp([(" hm", 3.0, 3.2)], 2.9, no_speech_prob=0.9, avg_logprob=-1.5)
    assert p.observe(silence, 2.9, 4.0, endpoint=True) == [Partial("", 2.6, 2.6, (), 4)]
    assert p.committed_end == 4.0
    assert p.close(5.0) == []


def test_boundary_words_are_neither_duplicated_nor_lost() -> None:
    p = CommitPolicy()
    p.observe(hyp([(" ask", 1.0, 1.3), (" not", 1.3, 1.6)]), 0.0, 2.0)
    p.observe(hyp([(" ask", 1.0, 1.3), (" not", 1.3, 1.6), (" what", 1.7, 1.9)]), 0.0, 2.5)
    assert p.committed_end == 1.6
    # The next window starts at 1.6: the model re-hears the tail of "not"...
    events = p.observe(hyp([(" not", 1.6, 1.65), (" what", 1.7, 1.9), (" your", 1.9, 2.2)], 1.6), 1.6, 3.0)
    assert texts(events) == [("Final", "what"), ("Partial", "your")]
    # ...and words that end before the commit point (a window that starts early) are dropped.
    events = p.observe(hyp([(" what", 1.7, 1.9), (" your", 1.9, 2.2), (" country", 2.2, 2.6)]), 0.0, 3.5)
    assert texts(events) == [("Final", "your"), ("Partial", "country")]


def test_word_times_are_absolute_clamped_and_monotonic() -> None:
    p = CommitPolicy()
    h = hyp([(" a", 10.0, 10.4), (" b", 10.3, 10.2), (" c", 10.9, 11.5), (" d", 11.6, 12.0)], 10.0)
    p.observe(h, 10.0, 11.2)
    words = p.pending
    assert [w.word for w in words] == [" a", " b", " c"]  # " d" starts after the window
    assert [(w.start, w.end) for w in words] == [(10.0, 10.4), (10.4, 10.4), (10.9, 11.2)]


def test_force_commit_and_skip() -> None:
    p = CommitPolicy()
    p.observe(hyp([(" a", 0.0, 1.0), (" b", 1.0, 2.0), (" c", 2.0, 3.0)]), 0.0, 3.0)
    assert texts(p.force_commit(2.0)) == [("Final", "a b"), ("Partial", "c")]
    assert p.committed_end == 2.0
    assert p.force_commit(2.5) == []
    p.skip_to(4.0)
    assert p.committed_end == 4.0 and p.pending == ()


def test_prompt_holds_the_last_committed_tokens() -> None:
    p = CommitPolicy(PolicyConfig(max_prompt_tokens=3), encode_text=fake_encode)
    words = [(f" w{'x' * i}", float(i), i + 0.5) for i in range(6)]
    p.observe(hyp(words), 0.0, 7.0)
    p.observe(hyp(words), 0.0, 7.0)
    assert p.prompt == (4, 5, 6)
    off = CommitPolicy(PolicyConfig(condition_on_committed=False), encode_text=fake_encode)
    off.observe(hyp(words), 0.0, 7.0)
    off.observe(hyp(words), 0.0, 7.0)
    assert off.prompt == ()


# --- golden streams ---------------------------------------------------------------------------


class ScriptedRecognizer:
    """Returns pre-scripted hypotheses in order, words given on the absolute clock.

    The script describes what the speaker said and when; each window hears the words that
    overlap it (cut at its end), as a model would.
    """

    def __init__(self, streamer: Streamer, script: list[dict[str, Any]]) -> None:
        self.streamer = streamer
        self.script = list(script)
        self.log: list[dict[str, Any]] = []

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        window = self.streamer.outstanding
        assert window is not None and len(requests) == 1 and self.script, "unexpected request"
        step = self.script.pop(0)
        words = [(w, s, min(e, window.end)) for w, s, e in step["words"] if s < window.end and e > window.start]
        self.log.append(
            {
                "start": window.start,
                "end": window.end,
                "endpoint": window.endpoint,
                "prompt": list(requests[0].prompt),
            }
        )
        return [hyp(words, window.start, **step.get("hyp", {}))]

    def encode_text(self, text: str) -> list[int]:
        return fake_encode(text)


class PatternVad:
    """Voiced in the given [start, end) second spans; 30 ms frames."""

    frame_samples = 480

    def __init__(self, spans: Sequence[tuple[float, float]]) -> None:
        self.spans = spans
        self.pos = 0

    def classify(self, frames: np.ndarray) -> list[bool]:
        out = []
        for _ in range(frames.shape[0]):
            t = self.pos / 16_000
            out.append(any(a <= t < b for a, b in self.spans))
            self.pos += self.frame_samples
        return out


def to_jsonable(event: Event) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 6)
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    return {"type": type(event).__name__, **clean(dataclasses.asdict(event))}


def run_scenario(name: str, seconds: float, spans: Sequence[tuple[float, float]], script: list[dict[str, Any]]) -> None:
    streamer = Streamer(StreamingConfig(), encode_text=fake_encode, vad=PatternVad(spans))
    recognizer = ScriptedRecognizer(streamer, script)
    audio = np.zeros(int(seconds * 16_000), dtype=np.float32)
    events = run_sync(streamer, recognizer, [audio[i : i + 1_600] for i in range(0, audio.shape[0], 1_600)])
    assert not recognizer.script, "script not used up"
    assert streamer.finished
    check_invariants(events)
    got = {"requests": recognizer.log, "events": [to_jsonable(e) for e in events]}
    path = GOLDEN / f"{name}.json"
    if REGEN:
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    assert path.exists(), f"missing {path}; run with STREAMWHISPER_REGEN_GOLDEN=1 and review it"
    assert got == json.loads(path.read_text())


def check_invariants(events: Sequence[Event]) -> None:
    seqs = [e.seq for e in events if isinstance(e, (Partial, Final))]
    assert seqs == list(range(len(seqs)))
    finals = [w for e in events if isinstance(e, Final) for w in e.words]
    assert all(a.end <= b.start for a, b in pairwise(finals))
    assert all(w.start <= w.end for w in finals)
    vad = [type(e) for e in events if isinstance(e, (SpeechStarted, SpeechEnded))]
    assert vad == [SpeechStarted, SpeechEnded] * (len(vad) // 2)


HELLO = [
    (" Hello", 0.4, 0.8),
    (" world,", 0.8, 1.2),
    (" how", 1.3, 1.5),
    (" are", 1.5, 1.7),
    (" you?", 1.7, 2.1),
    (" I'm", 2.5, 2.7),
    (" fine.", 2.7, 3.2),
    (" Thanks.", 3.4, 3.9),
]


def test_golden_agreement_and_endpoint() -> None:
    misheard = [(" Hello", 0.4, 0.8), (" word", 0.8, 1.0)]
    run_scenario(
        "agreement_endpoint",
        seconds=6.0,
        spans=[(0.3, 4.0)],
        script=[{"words": misheard}] + [{"words": HELLO}] * 4,
    )


def test_golden_non_speech_is_dropped() -> None:
    run_scenario(
        "non_speech",
        seconds=4.0,
        spans=[(0.3, 2.0)],
        script=[
            {"words": [(" Uh", 0.4, 0.9)], "hyp": {"avg_logprob": -0.8}},
            {
                "words": [(" Thank", 0.4, 0.9), (" you.", 0.9, 1.2)],
                "hyp": {"no_speech_prob": 0.8, "avg_logprob": -1.1},
            },
            {"words": [(" Subtitles", 0.4, 1.5)], "hyp": {"avg_logprob": -1.7}},
        ],
    )


def test_golden_repetition_loop_is_cut() -> None:
    # Said: "so thank you very much"; one hypothesis loops on "thank you" instead.
    said = [
        (" so", 0.4, 0.6),
        (" thank", 0.6, 0.8),
        (" you", 0.8, 1.0),
        (" very", 1.1, 1.4),
        (" much.", 1.4, 1.8),
    ]
    loop = said[:1] + [(w, 0.6 + 0.2 * i, 0.8 + 0.2 * i) for i, w in enumerate([" thank", " you"] * 6)]
    run_scenario(
        "repetition_loop",
        seconds=4.0,
        spans=[(0.3, 2.0)],
        script=[
            {"words": said},
            {"words": loop, "hyp": {"compression_ratio": 3.1}},
            {"words": said},
        ],
    )


def test_golden_boundary_repeat_is_dropped() -> None:
    said = HELLO[:7]
    misheard = [*said[:4], (" your", 1.7, 2.1), *said[5:]]
    # After "how are" is committed (trim at 1.7 s), the model hears the tail of "are" again.
    echo = [(" are", 1.7, 1.75), (" you?", 1.75, 2.1), *said[5:]]
    run_scenario(
        "boundary_repeat",
        seconds=5.0,
        spans=[(0.3, 3.6)],
        script=[
            {"words": said},
            {"words": said},
            {"words": misheard},
            {"words": echo},
            {"words": echo[1:]},
        ],
    )
