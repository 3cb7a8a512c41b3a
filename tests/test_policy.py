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
from fakes import ScriptedRecognizer, SpanVad, fake_encode, hyp

from streamwhisper.events import Event, Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord
from streamwhisper.streaming.config import PolicyConfig, StreamingConfig
from streamwhisper.streaming.policy import CommitPolicy, find_loop, normalize_word, screen
from streamwhisper.runtime.replay import drive
from streamwhisper.streaming.streamer import Streamer

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("STREAMWHISPER_REGEN_GOLDEN") == "1"

# The agreement mechanics alone: any window may commit, and a word only needs to end two of
# Whisper's 20 ms steps before its window's end (the defaults are stricter; see their tests).
AGREEMENT = PolicyConfig(commit_margin_s=0.04, min_commit_window_s=0.0)


def texts(events: Sequence[Event]) -> list[tuple[str, str]]:
    return [(type(e).__name__, e.text) for e in events if isinstance(e, (Partial, Final))]


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


@pytest.mark.parametrize(
    ("words", "cut"),
    [
        ("i think i think so", None),  # a repeated pair is speech
        ("then the same with ugly ones then the same with ugly ones then the", 6),
        ("ten of clubs ten of clubs", 3),
        ("and so and so on", None),
        ("a b c a b d", None),
    ],
)
def test_find_loop_long_phrases_twice(words: str, cut: int | None) -> None:
    assert find_loop(words.split(), max_ngram=8, min_repeats=3, long_ngram=3) == cut


def test_screen_rejects_silence_low_confidence_and_compression() -> None:
    cfg = PolicyConfig()
    words = [(" hi", 0.0, 0.3)]
    assert screen(hyp(words, no_speech_prob=0.9, avg_logprob=-1.2), cfg) == ((), "no_speech")
    # Whisper's rule needs both: confident text wins over a high no-speech probability...
    whisper_rule = PolicyConfig(no_speech_hard_threshold=1.0)
    assert screen(hyp(words, no_speech_prob=0.9, avg_logprob=-0.3), whisper_rule)[1] == ""
    # ...but live captions drop what the model itself calls non-speech (no_speech_hard_threshold)
    assert screen(hyp(words, no_speech_prob=0.9, avg_logprob=-0.3), cfg) == ((), "no_speech_hard")
    assert screen(hyp(words, no_speech_prob=0.5, avg_logprob=-0.3), cfg)[1] == ""
    assert screen(hyp(words, avg_logprob=-1.6), cfg) == ((), "low_logprob")
    assert screen(hyp(words, compression_ratio=2.5), cfg) == ((), "compression_ratio")
    looped = [(" thank", 0.0, 0.2), (" you", 0.2, 0.4)] * 4
    kept, reason = screen(hyp(looped, compression_ratio=3.0), cfg)
    assert reason == "loop" and [w.word for w in kept] == [" thank", " you"]
    kept, _ = screen(hyp([(" hi", 0.0, 0.2), (" ...", 0.2, 0.3), (" there", 0.3, 0.5)]), cfg)
    assert [w.word for w in kept] == [" hi", " there"]


def test_screen_drops_a_hypothesis_that_is_only_a_stock_phrase() -> None:
    cfg = PolicyConfig()
    outro = [(" Thanks", 0.0, 0.3), (" for", 0.3, 0.5), (" watching!", 0.5, 0.9)]
    assert screen(hyp(outro), cfg) == ((), "stock_phrase")
    # inside longer speech the same words are kept
    longer = [(" Thanks", 0.0, 0.3), (" for", 0.3, 0.5), (" watching", 0.5, 0.9), (" us", 0.9, 1.1)]
    kept, reason = screen(hyp(longer), cfg)
    assert reason == "" and len(kept) == 4
    assert screen(hyp(outro), PolicyConfig(stock_phrases=()))[1] == ""


def test_a_short_sampled_hypothesis_is_dropped_unless_the_last_one_said_it() -> None:
    thanks = [(" Thank", 0.0, 0.3), (" you.", 0.3, 0.6)]
    cfg = PolicyConfig()
    assert screen(hyp(thanks, temperature=0.4), cfg) == ((), "short_sample")
    assert screen(hyp(thanks, temperature=0.0), cfg)[1] == ""  # said clearly, it is speech
    longer = thanks + [(" for", 0.6, 0.8), (" coming.", 0.8, 1.2)]
    assert screen(hyp(longer, temperature=0.4), cfg)[1] == ""
    assert screen(hyp(thanks, temperature=0.4), PolicyConfig(sampled_min_words=0))[1] == ""
    assert screen(hyp(thanks, temperature=0.4), cfg, lambda ws: True)[1] == ""
    # in a stream: a sampled "Thank you." after silence gives nothing; after a clear one, it stays
    p = CommitPolicy(PolicyConfig(), encode_text=fake_encode)
    assert p.observe(hyp(thanks, temperature=0.4), 0.0, 2.0) == []
    assert p.observe(hyp(thanks), 0.0, 2.5)[-1].text == "Thank you."
    assert p.observe(hyp(thanks, temperature=0.4), 0.0, 3.0, endpoint=True)[-1].text == "Thank you."


# --- CommitPolicy -----------------------------------------------------------------------------


def test_local_agreement_commits_the_confirmed_prefix() -> None:
    p = CommitPolicy(AGREEMENT, encode_text=fake_encode)
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
    p = CommitPolicy(AGREEMENT)
    p.observe(hyp([(" ask", 1.0, 1.3), (" not", 1.3, 1.6)]), 0.0, 1.6)
    # Both agree, but " not" reaches the end of the window: it may be cut there.
    assert texts(p.observe(hyp([(" ask", 1.0, 1.3), (" not", 1.3, 1.98)]), 0.0, 2.0)) == [
        ("Final", "ask"),
        ("Partial", "not"),
    ]
    assert texts(p.observe(hyp([(" not", 1.3, 1.7)], 1.3), 1.3, 3.0)) == [("Final", "not")]


def test_unchanged_partial_is_not_repeated() -> None:
    p = CommitPolicy()
    assert texts(p.observe(hyp([(" yes", 0.0, 0.5)]), 0.0, 1.0)) == [("Partial", "yes")]
    assert texts(p.observe(hyp([(" no", 0.0, 0.5)]), 0.0, 2.0)) == [("Partial", "no")]
    assert p.observe(hyp([(" maybe", 0.0, 0.5)], no_speech_prob=0.99, avg_logprob=-2.0), 0.0, 3.0) == [
        Partial("", 0.0, 0.0, (), 2)
    ]
    assert p.observe(hyp([]), 0.0, 3.5) == []


def test_endpoint_finalises_the_rest() -> None:
    p = CommitPolicy(AGREEMENT)
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
    p = CommitPolicy(AGREEMENT)
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
    p = CommitPolicy(AGREEMENT)
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


def test_prompt_after_a_pause_ends_as_a_sentence() -> None:
    """A new utterance is conditioned on a finished sentence; inside speech the prompt is as said."""
    words = [(" ask", 0.0, 0.5), (" not", 0.5, 1.0), (" what", 1.0, 1.5), (" next", 1.5, 2.0)]
    for close in (True, False):
        p = CommitPolicy(PolicyConfig(close_prompt_at_pause=close), encode_text=lambda t: [ord(c) for c in t])
        p.observe(hyp(words), 0.0, 2.3)
        p.observe(hyp(words), 0.0, 2.3)  # "ask not what" committed inside speech
        assert bytes(p.prompt).decode() == " ask not what"
        assert bytes(p.context(1.6)[0]).decode() == " ask not what"
        p.close(3.0)  # a pause: "next" is final too
        assert bytes(p.context(3.5)[0]).decode() == (" ask not what next." if close else " ask not what next")
    p.observe(hyp([(" done.", 3.6, 4.0)], 3.5), 3.5, 4.5, endpoint=True)
    assert bytes(p.context(5.0)[0]).decode() == " ask not what next done."


def test_forced_prefix_ends_without_its_punctuation_mark() -> None:
    """The committed text keeps its punctuation; the prefix leaves the last mark to the decoder."""
    words = [(" That", 0.0, 0.5), (" rose,", 0.5, 1.0), (" Mike.", 1.0, 2.0)]
    for bare in (True, False):
        p = CommitPolicy(PolicyConfig(bare_prefix_end=bare), encode_text=lambda t: [ord(c) for c in t])
        p.observe(hyp(words), 0.0, 2.3)
        (final,) = [e for e in p.observe(hyp(words), 0.0, 2.3) if isinstance(e, Final)]
        assert final.text == "That rose,"
        prompt, prefix = p.context(0.0)
        assert prompt == () and bytes(prefix).decode() == (" That rose" if bare else " That rose,")
        assert bytes(p.context(0.7)[1]).decode() == (" rose" if bare else " rose,")


# --- default guards: short windows, the commit margin, prompt copies --------------------------

ONE_TWO = [(" one", 0.5, 0.9), (" two", 1.0, 1.4)]


def test_windows_shorter_than_min_commit_window_commit_nothing() -> None:
    cfg = PolicyConfig()
    assert cfg.min_commit_window_s == 2.0
    p = CommitPolicy(cfg)
    words = [(w, s + 10.0, e + 10.0) for w, s, e in ONE_TWO]
    assert texts(p.observe(hyp(words, 10.0), 10.0, 11.5)) == [("Partial", "one two")]
    # The next hypothesis agrees, but its window is 1.9 s long: agreement only.
    assert p.observe(hyp(words, 10.0), 10.0, 11.9) == []
    assert p.committed_end == 0.0 and [w.word for w in p.pending] == [" one", " two"]
    # A window of min_commit_window_s (in whole mel frames: 2 s of audio is 1.99 s) commits
    # what it agrees on with the short one before.
    events = p.observe(hyp([*words, (" three", 11.5, 11.6)], 10.0), 10.0, 11.99)
    assert texts(events) == [("Final", "one two"), ("Partial", "three")]
    assert p.committed_end == 11.4


def test_min_commit_window_is_configurable() -> None:
    p = CommitPolicy(PolicyConfig(min_commit_window_s=1.0))
    p.observe(hyp(ONE_TWO), 0.0, 1.9)
    assert texts(p.observe(hyp(ONE_TWO), 0.0, 1.95)) == [("Final", "one two")]


def test_a_forced_endpoint_inside_speech_keeps_the_commit_point_at_the_last_word() -> None:
    p = CommitPolicy(AGREEMENT)
    events = p.observe(hyp([(" ask", 0.5, 0.9), (" not", 1.0, 1.4)]), 0.0, 2.0, endpoint=True, speech_goes_on=True)
    assert texts(events) == [("Final", "ask not")] and p.committed_end == 1.4
    # The next utterance starts a second back: "not" heard again is dropped, the cut "what" kept.
    events = p.observe(hyp([(" not", 1.0, 1.4), (" what", 1.9, 2.3)], 1.0), 1.0, 3.0)
    assert texts(events) == [("Partial", "what")]


def test_a_word_cut_by_a_forced_endpoint_waits_for_the_next_utterance() -> None:
    p = CommitPolicy(AGREEMENT)
    cut = hyp([(" ask", 0.5, 0.9), (" not", 1.0, 1.4), (" why", 1.8, 2.0)])  # "what", cut at 2.0
    events = p.observe(cut, 0.0, 2.0, endpoint=True, speech_goes_on=True)
    assert texts(events) == [("Final", "ask not")] and p.committed_end == 1.4
    events = p.observe(hyp([(" not", 1.0, 1.4), (" what", 1.8, 2.2)], 1.0), 1.0, 3.0)
    assert texts(events) == [("Partial", "what")]
    # at a VAD endpoint (silence after the speech) the last word is whole: it is kept
    q = CommitPolicy(AGREEMENT)
    assert texts(q.observe(cut, 0.0, 2.0, endpoint=True)) == [("Final", "ask not why")]


def test_a_loop_is_judged_by_the_words_before_it() -> None:
    """A loop's repeats are confident (it feeds itself); the words before it decide."""
    loop = [(w, 2.0 + 0.2 * i, 2.2 + 0.2 * i) for i, w in enumerate([" a", " little", " bit", " of"] * 5)]
    said = [(" I'm", 0.0, 0.4), (" going", 0.4, 0.8), (" to", 0.8, 1.2), (" do", 1.2, 2.0)]
    doubted, sure = hyp(said + loop), hyp(said + loop)
    doubted = dataclasses.replace(doubted, words=tuple(
        dataclasses.replace(w, probability=p)
        for w, p in zip(doubted.words, [0.14, 0.3, 0.93, 0.04, 0.17, 0.19, 0.3, 0.45] + [0.85] * 16, strict=True)
    ))
    assert screen(doubted, PolicyConfig()) == ((), "low_word_probability")  # dishes clattering
    words, reason = screen(sure, PolicyConfig())
    assert reason == "loop" and " ".join(w.word.strip() for w in words) == "I'm going to do a little bit of"


def test_an_endpoint_finalises_a_short_utterance() -> None:
    p = CommitPolicy()  # the defaults: nothing commits in a 1.5 s window...
    assert texts(p.observe(hyp(ONE_TWO), 0.0, 1.0)) == [("Partial", "one")]
    assert texts(p.observe(hyp(ONE_TWO), 0.0, 1.5)) == [("Partial", "one two")]
    # ...but the endpoint finalises it, agreed or not.
    events = p.observe(hyp(ONE_TWO), 0.0, 1.8, endpoint=True)
    assert texts(events) == [("Final", "one two")] and isinstance(events[0], Final) and events[0].endpoint
    assert p.committed_end == 1.8


# Four agreed words in a window [0, 3): they end 1.0, 0.55, 0.2 and 0.03 s before its end.
AGREED = [(" a", 1.5, 2.0), (" b", 2.1, 2.45), (" c", 2.5, 2.8), (" d", 2.85, 2.97)]


@pytest.mark.parametrize(
    ("margin", "committed"),
    [(0.02, "a b c d"), (0.04, "a b c"), (0.3, "a b"), (0.6, "a"), (1.1, "")],
)
def test_commit_margin_holds_back_words_near_the_window_end(margin: float, committed: str) -> None:
    p = CommitPolicy(PolicyConfig(commit_margin_s=margin, sure_margin_s=margin, min_commit_window_s=0.0))
    p.observe(hyp(AGREED), 0.0, 3.0)
    events = p.observe(hyp(AGREED), 0.0, 3.0)
    finals = [e.text for e in events if isinstance(e, Final)]
    assert finals == ([committed] if committed else [])
    assert " ".join(w.word.strip() for w in p.pending) == "a b c d".removeprefix(committed).strip()
    # The held words are committed once a longer window leaves them clear of its end.
    if committed != "a b c d":
        events = p.observe(hyp(AGREED), 0.0, 3.0 + margin + 0.05)
        assert [e.text for e in events if isinstance(e, Final)] == ["a b c d".removeprefix(committed).strip()]


def test_default_commit_margin() -> None:
    assert PolicyConfig().commit_margin_s == 0.5
    p = CommitPolicy()
    p.observe(hyp(AGREED), 0.0, 3.0)
    assert texts(p.observe(hyp(AGREED), 0.0, 3.0)) == [("Final", "a b"), ("Partial", "c d")]


def _with_probabilities(words: Sequence[tuple[str, float, float]], probabilities: Sequence[float]) -> Hypothesis:
    h = hyp(words)
    said = tuple(dataclasses.replace(w, probability=p) for w, p in zip(h.words, probabilities, strict=True))
    return dataclasses.replace(h, words=said)


@pytest.mark.parametrize(
    ("probabilities", "committed"),
    [
        ([0.9, 0.9, 0.9, 0.9], "a b"),  # c ends 0.2 s before the end: inside even the sure margin
        ([0.95, 0.5, 0.9, 0.9], "a"),  # b is doubted: the full margin
        ([0.95, 0.95, 0.95], "a b"),  # b is sure and followed by c
    ],
)
def test_a_sure_word_followed_by_another_needs_a_shorter_margin(probabilities: list[float], committed: str) -> None:
    config = PolicyConfig(commit_margin_s=0.6, sure_margin_s=0.3, sure_probability=0.9, min_commit_window_s=0.0)
    words = AGREED[: len(probabilities)]
    p = CommitPolicy(config)
    p.observe(_with_probabilities(words, probabilities), 0.0, 3.0)
    finals = [e.text for e in p.observe(_with_probabilities(words, probabilities), 0.0, 3.0) if isinstance(e, Final)]
    assert finals == [committed]


def test_the_last_word_of_a_hypothesis_needs_the_full_margin() -> None:
    config = PolicyConfig(commit_margin_s=0.6, sure_margin_s=0.3, min_commit_window_s=0.0)
    p = CommitPolicy(config)
    two = AGREED[:2]  # b ends 0.55 s before the window's end and nothing follows it
    p.observe(_with_probabilities(two, [0.99, 0.99]), 0.0, 3.0)
    events = p.observe(_with_probabilities(two, [0.99, 0.99]), 0.0, 3.0)
    assert [e.text for e in events if isinstance(e, Final)] == ["a"]


SAID = [(f" {w}", 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i, w in enumerate(["one", "two", "three", "four", "five", "six"])]


def committed_six(config: PolicyConfig = AGREEMENT) -> CommitPolicy:
    """A policy that committed "one two three four five six" (ending at 2.8 s)."""
    p = CommitPolicy(config)
    p.observe(hyp(SAID), 0.0, 3.0)
    assert texts(p.observe(hyp(SAID), 0.0, 3.0)) == [("Final", "one two three four five six")]
    return p


def later(words: str, start: float = 3.0) -> list[tuple[str, float, float]]:
    return [(f" {w}", start + 0.4 * i, start + 0.4 * i + 0.3) for i, w in enumerate(words.split())]


def test_a_run_of_five_committed_words_is_dropped_as_a_prompt_copy() -> None:
    assert (PolicyConfig().copy_min_words, PolicyConfig().copy_lookback_words) == (5, 32)
    p = committed_six()
    # The model copies five committed words (the prompt) into new audio: they are dropped.
    events = p.observe(hyp(later("seven two three four five six eight"), 2.8), 2.8, 6.0)
    assert texts(events) == [("Partial", "seven eight")]
    # Case and punctuation do not hide a copy; the new words still agree and are committed.
    events = p.observe(hyp(later("seven Two, three four five six. eight"), 2.8), 2.8, 6.5)
    assert texts(events) == [("Final", "seven eight")]


def test_a_run_of_four_committed_words_is_kept() -> None:
    p = committed_six()
    events = p.observe(hyp(later("seven three four five six eight"), 2.8), 2.8, 6.0)
    assert texts(events) == [("Partial", "seven three four five six eight")]


def test_prompt_copies_are_dropped_in_prefixed_windows_too() -> None:
    p = committed_six()
    # The window still holds the committed words (decoded as the prefix): only new words come.
    events = p.observe(hyp(later("two three four five six seven")), 0.0, 6.0, prefixed=True)
    assert texts(events) == [("Partial", "seven")]


def test_a_prefixed_window_repeating_the_last_committed_words_drops_them() -> None:
    p = committed_six()
    # After the forced prefix the decoder says its last phrase again: that is not new speech.
    events = p.observe(hyp(later("five six seven")), 0.0, 6.0, prefixed=True)
    assert texts(events) == [("Partial", "seven")]
    # One repeated word may be speech ("the the"): kept.
    q = committed_six()
    events = q.observe(hyp(later("six seven")), 0.0, 6.0, prefixed=True)
    assert texts(events) == [("Partial", "six seven")]


def test_copy_guard_lookback_and_switch() -> None:
    # Committed words older than copy_lookback_words are not compared.
    p = committed_six(dataclasses.replace(AGREEMENT, copy_lookback_words=5))
    events = p.observe(hyp(later("one two three four five eight"), 2.8), 2.8, 6.0)
    assert texts(events) == [("Partial", "one two three four five eight")]
    p = committed_six(dataclasses.replace(AGREEMENT, copy_min_words=0))  # 0 disables the guard
    events = p.observe(hyp(later("seven two three four five six eight"), 2.8), 2.8, 6.0)
    assert texts(events) == [("Partial", "seven two three four five six eight")]


# --- golden streams ---------------------------------------------------------------------------


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


def run_scenario(
    name: str,
    seconds: float,
    spans: Sequence[tuple[float, float]],
    script: list[dict[str, Any]],
    config: StreamingConfig | None = None,
) -> None:
    streamer = Streamer(config or StreamingConfig(), encode_text=fake_encode, vad=SpanVad(spans))
    recognizer = ScriptedRecognizer(streamer, script)
    audio = np.zeros(int(seconds * 16_000), dtype=np.float32)
    events = drive(streamer, recognizer, [audio[i : i + 1_600] for i in range(0, audio.shape[0], 1_600)])
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


# Trim the window at every commit, with the agreement mechanics alone: the scenarios written for
# LocalAgreement at the commit point (the defaults keep committed words as a forced prefix).
# pause_hold_ms=0: the scripts give a hypothesis in the endpoint hangover too
TRIM_AT_COMMIT = StreamingConfig(
    min_step_s=1.0, first_step_s=1.0, trim_after_s=0.0, trim_keep_s=0.0, pause_hold_ms=0, policy=AGREEMENT
)
# The other settings at their defaults; every script gives one hypothesis per second of audio.
DEFAULTS_1S = StreamingConfig(min_step_s=1.0, first_step_s=1.0)

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
        config=TRIM_AT_COMMIT,
    )


def test_golden_agreement_with_default_settings() -> None:
    # The same speech with the defaults (at a 1 s step): the 1 s window commits nothing; then the committed
    # words stay in the window and are sent as the forced prefix of the endpoint request.
    misheard = [(" Hello", 0.4, 0.8), (" word", 0.8, 1.0)]
    run_scenario(
        "agreement_default",
        seconds=6.0,
        spans=[(0.3, 4.0)],
        script=[{"words": misheard}] + [{"words": HELLO}] * 4,
        config=DEFAULTS_1S,
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
        config=DEFAULTS_1S,
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
        config=TRIM_AT_COMMIT,
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
        config=TRIM_AT_COMMIT,
    )


@pytest.mark.parametrize(
    ("text", "dropped"),
    [
        ("Oh, oh, oh.", True),
        ("APPLAUSE", True),
        ("(music) ♪", True),
        (" W E", True),
        (" I", False),
        (" a cat", False),
        (" Oh, NASA called.", False),
    ],
)
def test_non_lexical_hypotheses_are_dropped(text: str, dropped: bool) -> None:
    words = [(" " + w, i * 0.3, i * 0.3 + 0.2) for i, w in enumerate(text.split())]
    kept, reason = screen(hyp(words), PolicyConfig())
    assert (reason == "non_lexical") is dropped, (text, reason)
    assert (not kept) is dropped


def test_low_word_probability_is_dropped() -> None:
    words = (HypothesisWord(" hello", 0.0, 0.4, 0.3), HypothesisWord(" there", 0.4, 0.8, 0.6))
    low = Hypothesis(" hello there", (), words, avg_logprob=-0.2, no_speech_prob=0.01, compression_ratio=1.0, language="en")
    assert screen(low, PolicyConfig()) == ((), "low_word_probability")
    assert screen(low, PolicyConfig(min_mean_word_probability=0.4))[1] == ""


def _doubted(words: Sequence[tuple[str, float, float]], offset: float = 0.0) -> Hypothesis:
    """A hypothesis whose words the model barely believes (probability 0.3)."""
    h = hyp(words, offset)
    return dataclasses.replace(h, words=tuple(dataclasses.replace(w, probability=0.3) for w in h.words))


def test_doubted_words_the_previous_hypothesis_said_are_kept() -> None:
    # The tail of an utterance, decoded again alone at its endpoint (a short window padded to
    # 30 s): the model doubts " you." it was sure of a moment before; agreement vouches for it.
    def said_for_you() -> CommitPolicy:
        policy = CommitPolicy(PolicyConfig())
        policy.observe(hyp([(" for", 7.0, 7.2)]), 0.0, 7.5)
        assert texts(policy.observe(hyp([(" for", 7.0, 7.2), (" you.", 7.3, 7.7)]), 0.0, 8.0)) == [
            ("Final", "for"), ("Partial", "you.")
        ]
        return policy

    policy = said_for_you()
    events = policy.observe(_doubted([(" you.", 7.3, 7.7)], offset=7.26), 7.26, 8.16, endpoint=True)
    finals = [e for e in events if isinstance(e, Final)]
    assert [f.text for f in finals] == ["you."] and finals[0].endpoint
    # ... and so is a doubted hypothesis going on from what the previous one said (a name
    # doubted twice, then followed by more words)
    policy = said_for_you()
    events = policy.observe(_doubted([(" you.", 7.3, 7.7), (" All", 7.7, 7.9)], offset=7.26), 7.26, 8.16, endpoint=True)
    assert [e.text for e in events if isinstance(e, Final)] == ["you. All"]
    # ... doubted words the previous hypothesis did not say are dropped
    policy = said_for_you()
    events = policy.observe(_doubted([(" thank", 7.3, 7.5), (" you.", 7.5, 7.7)], offset=7.26), 7.26, 8.16, endpoint=True)
    assert not [e for e in events if isinstance(e, Final) and e.text]
    # ... and with nothing said before, doubt drops the hypothesis
    events = CommitPolicy(PolicyConfig()).observe(_doubted([(" you.", 0.3, 0.7)]), 0.0, 1.0, endpoint=True)
    assert not [e for e in events if isinstance(e, Final) and e.text]


def test_a_short_hypothesis_with_one_doubted_word_is_dropped() -> None:
    # "Thank you." on music: the arithmetic mean (0.52) passes the 0.5 floor, the geometric
    # mean of a hypothesis of three words or fewer (0.26) does not.
    words = (HypothesisWord(" Thank", 0.0, 0.4, 0.07), HypothesisWord(" you.", 0.4, 0.8, 0.96))
    thanks = Hypothesis(" Thank you.", (), words, avg_logprob=-0.8, no_speech_prob=0.3, compression_ratio=1.0, language="en")
    assert screen(thanks, PolicyConfig()) == ((), "low_word_probability")
    # a longer hypothesis keeps the arithmetic mean: one doubted word does not drop a sentence
    longer = words + tuple(HypothesisWord(f" w{i}", 1.0 + i, 1.5 + i, 0.6) for i in range(3))
    kept, reason = screen(dataclasses.replace(thanks, words=longer), PolicyConfig())
    assert reason == "" and len(kept) == 5


def test_a_doubted_word_needs_a_third_hypothesis_when_asked() -> None:
    def run(config: PolicyConfig) -> list[list[tuple[str, str]]]:
        policy = CommitPolicy(config)
        words = [(" the", 0.0, 0.3), (" Danger", 0.3, 0.6), (" Trail", 0.6, 0.9), (" ran", 0.9, 1.2)]
        out = []
        for end in (2.0, 3.0, 4.0):
            h = hyp(words)
            # the model doubts "Trail" every time it says it
            h = dataclasses.replace(h, words=tuple(
                dataclasses.replace(w, probability=0.4 if "Trail" in w.word else 0.9) for w in h.words
            ))
            out.append(texts(policy.observe(h, 0.0, end)))
        return out

    # by default two hypotheses commit every word ...
    assert run(AGREEMENT)[1] == [("Final", "the Danger Trail ran")]
    # ... with commit_min_probability the doubted word and those after it wait for a third
    first, second, third = run(dataclasses.replace(AGREEMENT, commit_min_probability=0.6))
    assert first == [("Partial", "the Danger Trail ran")]
    assert second == [("Final", "the Danger"), ("Partial", "Trail ran")]
    assert third == [("Final", "Trail ran")]
