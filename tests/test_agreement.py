"""LocalAgreement-2: commits, endpoints, margins, prompts and prefixes; golden streams end to end."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import AGREEMENT, ScriptedRecognizer, SpanVad, fake_encode, hyp, texts

from streamwhisper.errors import ConfigError
from streamwhisper.events import Event, Final, Partial, SpeechEnded, SpeechStarted, Word
from streamwhisper.model.recognizer import RecognitionRequest
from streamwhisper.runtime.replay import drive
from streamwhisper.streaming.agreement import CommitPolicy
from streamwhisper.streaming.config import PolicyConfig, StreamingConfig
from streamwhisper.streaming.screening import unheard_after
from streamwhisper.streaming.streamer import Streamer

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("STREAMWHISPER_REGEN_GOLDEN") == "1"


# --- CommitPolicy -----------------------------------------------------------------------------


def test_local_agreement_commits_the_confirmed_prefix() -> None:
    p = CommitPolicy(AGREEMENT)
    e1 = p.observe(hyp([(" Hello", 0.4, 0.8), (" word", 0.8, 1.0)]), 0.0, 1.0)
    assert texts(e1) == [("Partial", "Hello word")]
    e2 = p.observe(hyp([(" hello,", 0.4, 0.8), (" world", 0.8, 1.2), (" how", 1.3, 1.5)]), 0.0, 2.0)
    assert texts(e2) == [("Final", "hello,"), ("Partial", "world how")]
    assert p.committed_end == 0.8 and p.prompt == " hello,"
    # The next window starts at the commit point; "world how" is confirmed.
    e3 = p.observe(hyp([(" world", 0.8, 1.2), (" how", 1.3, 1.5), (" are", 1.5, 1.7)], 0.8), 0.8, 3.0)
    assert texts(e3) == [("Final", "world how"), ("Partial", "are")]
    seqs = [e.seq for e in e1 + e2 + e3 if isinstance(e, (Partial, Final))]
    assert seqs == list(range(len(seqs)))


def test_reopen_point_goes_back_over_the_last_committed_words_after_a_short_gap() -> None:
    p = CommitPolicy(AGREEMENT)
    assert p.reopen_point(2.0, 3.0, 3.0) == 2.0  # nothing committed yet
    words = [(f" w{i}", 0.5 + 0.5 * i, 0.9 + 0.5 * i) for i in range(10)]  # 0.5 .. 5.4 s
    p.observe(hyp(words), 0.0, 6.0, endpoint=True)
    assert p.last_word_end == 5.4 and p.committed_end == 6.0
    # the words of the last 3 s before the commit point (6.0): after " w4" (ends 2.9), half-way to " w5"
    assert p.reopen_point(7.0, 3.0, 3.0) == pytest.approx(2.95)
    assert p.reopen_point(8.4, 3.0, 3.0) == pytest.approx(2.95)  # 3.0 s after the last word
    assert p.reopen_point(8.5, 3.0, 3.0) == 8.5  # later: alone
    assert p.reopen_point(7.0, 0.0, 3.0) == 7.0  # disabled
    assert p.reopen_point(6.2, 1.0, 1.0) == pytest.approx(4.95)  # the last second: " w9" alone
    assert p.reopen_point(6.2, 0.5, 1.0) == 6.2


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
    assert texts(p.observe(hyp([(" no", 0.0, 0.5)]), 0.0, 1.5)) == [("Partial", "no")]
    assert p.observe(hyp([(" maybe", 0.0, 0.5)], no_speech_prob=0.99, avg_logprob=-2.0), 0.0, 2.0) == [
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
    p = CommitPolicy(AGREEMENT)
    p.observe(hyp([(" a", 0.0, 1.0), (" b", 1.0, 2.0), (" c", 2.0, 3.0)]), 0.0, 3.0)
    assert texts(p.force_commit(2.0)) == [("Final", "a b"), ("Partial", "c")]
    assert p.committed_end == 2.0
    assert p.force_commit(2.5) == []
    p.skip_to(4.0)
    assert p.committed_end == 4.0 and p.pending == ()


def test_prompt_holds_the_last_committed_words() -> None:
    p = CommitPolicy(PolicyConfig(max_prompt_tokens=3))
    words = [(f" w{'x' * i}", float(i), i + 0.5) for i in range(6)]
    p.observe(hyp(words), 0.0, 7.0)
    p.observe(hyp(words), 0.0, 7.0)
    assert p.prompt == " wxxx wxxxx wxxxxx"
    # the recogniser keeps the prompt's last max_prompt_tokens tokens (one a word here)
    request = RecognitionRequest(np.zeros((80, 1), np.float32), prompt_text=p.prompt, max_prompt_tokens=3)
    assert request.with_tokens(fake_encode).prompt == (4, 5, 6)
    off = CommitPolicy(PolicyConfig(condition_on_committed=False))
    off.observe(hyp(words), 0.0, 7.0)
    off.observe(hyp(words), 0.0, 7.0)
    assert off.prompt == ""


def test_prompt_after_a_pause_ends_as_a_sentence() -> None:
    """A new utterance is conditioned on a finished sentence; inside speech the prompt is as said."""
    words = [(" ask", 0.0, 0.5), (" not", 0.5, 1.0), (" what", 1.0, 1.5), (" next", 1.5, 2.0)]
    for close in (True, False):
        p = CommitPolicy(PolicyConfig(close_prompt_at_pause=close))
        p.observe(hyp(words), 0.0, 2.3)
        p.observe(hyp(words), 0.0, 2.3)  # "ask not what" committed inside speech
        assert p.prompt == " ask not what"
        assert p.context(1.6)[0] == " ask not what"
        p.close(3.0)  # a pause: "next" is final too
        assert p.context(3.5)[0] == (" ask not what next." if close else " ask not what next")
    p.observe(hyp([(" done.", 3.6, 4.0)], 3.5), 3.5, 4.5, endpoint=True)
    assert p.context(5.0)[0] == " ask not what next done."


def test_forced_prefix_ends_without_its_punctuation_mark() -> None:
    """The committed text keeps its punctuation; the prefix leaves the last mark to the decoder."""
    words = [(" That", 0.0, 0.5), (" rose,", 0.5, 1.0), (" Mike.", 1.0, 2.0)]
    for bare in (True, False):
        p = CommitPolicy(PolicyConfig(bare_prefix_end=bare))
        events = p.observe(hyp(words), 0.0, 2.3) + p.observe(hyp(words), 0.0, 2.3)
        (final,) = [e for e in events if isinstance(e, Final)]
        assert final.text == "That rose,"
        prompt, prefix = p.context(0.0)
        assert prompt == "" and prefix == (" That rose" if bare else " That rose,")
        assert p.context(0.7)[1] == (" rose" if bare else " rose,")


# Any window commits, and every word needs two hypotheses: the reopened windows below count them.
TWO_SAY_IT = PolicyConfig(min_commit_window_s=0.0, sure_hypotheses=2)


def test_a_window_reopened_after_a_pause_hears_its_committed_words_again() -> None:
    """A window reopened over the words of an utterance that closed at a pause is decoded
    without them as a forced prefix, and without the prompt that breaks off before them: as a
    prefix, "for you" made the decoder take "ask what you" for the prefix's end and go on with
    "can do for your country". Its words up to the commit point (in the pause) are the
    committed ones."""
    words = [(" can", 0.0, 0.3), (" do", 0.3, 0.5), (" for", 0.5, 1.0), (" you.", 1.0, 1.6)]
    p = CommitPolicy(TWO_SAY_IT)
    p.observe(hyp(words), 0.0, 2.0, endpoint=True)  # the utterance ends at a pause: commit point 2.0
    assert p.context(0.7) == ("", "")
    # " you." again, its end timed past the commit point, then the new words
    said = [(" you.", 1.0, 2.1), (" Ask", 2.5, 2.8), (" what", 2.8, 3.1), (" you", 3.1, 3.3)]
    p.observe(hyp(said, 0.7), 0.7, 3.6)
    assert texts(p.observe(hyp(said, 0.7), 0.7, 3.6)) == [("Final", "Ask what"), ("Partial", "you")]
    assert p.context(0.7) == (" can do", " for you. Ask what"), "inside speech the committed words are the prefix"
    # the alignment can give the committed word again no audio, past the commit point
    q = CommitPolicy(TWO_SAY_IT)
    q.observe(hyp(words), 0.0, 2.0, endpoint=True)
    again = [(" do", 0.3, 0.5), (" for", 0.5, 1.0), (" you.", 2.4, 2.4), (" Ask", 2.5, 2.8), (" what", 2.8, 3.1)]
    q.observe(hyp(again, 0.2), 0.2, 3.6)
    assert texts(q.observe(hyp(again, 0.2), 0.2, 3.6)) == [("Final", "Ask what")]
    reopened = CommitPolicy(PolicyConfig(reopened_prefix=True))
    reopened.observe(hyp(words), 0.0, 2.0, endpoint=True)
    assert reopened.context(0.7) == (" can do", " for you")


def test_a_reopened_window_that_hears_nothing_new_gives_the_utterance_its_prefix() -> None:
    """Heard again, the committed words can end the decoding before the new speech ("... of
    about 1455." and <|endoftext|>): the utterance's next windows take them as the prefix."""
    words = [(" can", 0.0, 0.3), (" do", 0.3, 0.5), (" for", 0.5, 1.0), (" you.", 1.0, 1.6)]
    p = CommitPolicy(PolicyConfig(min_commit_window_s=0.0))
    p.observe(hyp(words), 0.0, 2.0, endpoint=True)
    assert p.observe(hyp(words[2:], 0.7), 0.7, 3.5) == []  # only the committed words again
    assert p.context(0.7) == (" can do", " for you")
    said = [(" Ask", 2.5, 2.8), (" what", 2.8, 3.1), (" you", 3.1, 3.3)]
    assert texts(p.observe(hyp(said, 0.7), 0.7, 3.6, endpoint=True, prefix=" for you")) == [("Final", "Ask what you")]
    p.observe(hyp([(" Yes.", 5.0, 5.4)], 4.0), 4.0, 6.0, endpoint=True)
    assert p.context(3.0) == ("", ""), "the next utterance hears its reopened words again"


def test_a_reopened_window_that_ends_at_the_committed_words_does_not_gainsay_the_pending_ones() -> None:
    """conversation_test_0 at 67.7-75.6 s: the reopened window heard "myself. Then in the same
    operations with", the next one ended its text at "myself." (<|endoftext|> before the new
    speech), and the prefixed window after it said "Then in the same operations with ugly ones."
    The window that ended early is no vote against the words before it: the third hypothesis
    agrees with the first, and "Then in the same" is final one window sooner."""
    words = [(" painful", 0.0, 0.5), (" to", 0.5, 0.7), (" myself.", 0.7, 1.6)]
    new = [(" Then", 2.5, 2.8), (" in", 2.8, 2.9), (" the", 2.9, 3.1), (" same", 3.1, 3.4), (" ones.", 3.4, 4.2)]
    p = CommitPolicy(TWO_SAY_IT)
    p.observe(hyp(words), 0.0, 2.0, endpoint=True)  # the utterance closed at a pause
    assert texts(p.observe(hyp(words + new[:4], 0.1), 0.1, 3.9)) == [("Partial", "Then in the same")]
    assert p.observe(hyp(words, 0.1), 0.1, 4.4) == [], "the decoder ended its text at 'myself.': the partial stays"
    assert p.pending and p.context(0.1)[1], "the next window takes the committed words as its prefix"
    assert not p.heard, "that hypothesis heard nothing of its own: the streamer does not count it as hearing the speech"
    assert copy.deepcopy(p).commit_pending() == [], "nor a pause's hypothesis: the older words wait for agreement"
    said = texts(p.observe(hyp(new, 0.1), 0.1, 4.9, prefix=p.context(0.1)[1]))
    assert said == [("Final", "Then in the same"), ("Partial", "ones.")]


def test_a_reopened_window_keeps_a_new_word_like_the_last_committed_one_after_the_pause() -> None:
    """Only a first word that starts before the commit point is the committed word heard again."""
    p = CommitPolicy(TWO_SAY_IT)
    p.observe(hyp([(" thank", 0.0, 0.4), (" you.", 0.4, 0.9)]), 0.0, 1.5, endpoint=True)
    said = [(" you.", 0.4, 0.9), (" You", 1.8, 2.0), (" know", 2.0, 2.3), (" what", 2.3, 2.5)]
    p.observe(hyp(said), 0.0, 2.9)
    assert texts(p.observe(hyp(said), 0.0, 2.9)) == [("Final", "You know"), ("Partial", "what")]


@pytest.mark.parametrize("unsaid", [True, False])
def test_a_reopened_window_keeps_the_words_a_pause_hypothesis_never_said(unsaid: bool) -> None:
    """LJ001-0014 at a slow cadence: the pause's decoder stopped at "part of their" (aligned to the
    window's end), the utterance closed on that hypothesis (``unsaid``: no endpoint request) and
    its endpoint moved the commit point past "productions, whatever they were.". The reopened
    window says them after the committed words: kept, from the last committed word's end. After
    an endpoint's own hypothesis, which heard that audio and said nothing, they are dropped."""
    words = [(" a", 0.0, 0.2), (" part", 0.2, 0.6), (" of", 0.6, 0.8), (" their", 0.8, 2.4)]
    said = [(" part", 0.2, 0.6), (" of", 0.6, 0.8), (" their", 0.8, 1.0), (" productions,", 1.0, 1.6)]
    said += [(" whatever", 1.6, 2.0), (" were.", 2.0, 2.45), (" The", 3.2, 3.4), (" Middle", 3.4, 3.7)]
    p = CommitPolicy(TWO_SAY_IT)
    p.observe(hyp(words), 0.0, 2.5)  # the pause's hypothesis
    p.close(3.0, unsaid=unsaid)
    assert p.committed_end == 3.0 and p.context(0.1) == ("", "")  # reopened: heard again
    p.observe(hyp(said, 0.1), 0.1, 4.5)
    final = p.observe(hyp(said, 0.1), 0.1, 4.5)[0]
    assert isinstance(final, Final)
    assert final.text == ("productions, whatever were. The Middle" if unsaid else "The Middle")
    assert final.start == (2.4 if unsaid else 3.2)


def test_unheard_after_finds_the_committed_words_said_again() -> None:
    """The first word after the committed ones said again (those in the window said first, or the
    last two said near where they were committed), when words before the commit point follow."""
    said = [(" a", 0.0, 0.2), (" part", 0.2, 0.6), (" of", 0.6, 0.8), (" their", 0.8, 2.4)]
    tail = [Word(w, s, e, 0.9) for w, s, e in said]
    cfg = PolicyConfig()

    def at(said: list[tuple[str, float, float]], start: float, committed_end: float = 3.0) -> int | None:
        return unheard_after(hyp(said, start).words, start, tail, committed_end, cfg)

    new = [(" productions,", 1.0, 1.6), (" were.", 2.0, 2.45), (" The", 3.2, 3.4)]
    assert at([(" of", 0.6, 0.8), (" their", 0.8, 1.0), *new], 0.7) == 2  # the words in the window
    assert at([(" part", 0.2, 0.6), (" Of", 0.6, 0.8), (" their", 0.8, 1.0), *new], 0.1) == 3  # the last two
    assert at([(" part", 0.2, 0.6), (" of", 0.6, 0.8), (" their", 0.8, 1.0), *new], 0.1, 1.2) is None  # none follows
    assert at([(" part", 0.2, 0.6), (" of", 0.6, 0.8), (" there", 0.8, 1.0), *new], 0.1) is None  # not said again
    far = [(" of", 0.6, 0.8), (" their", 0.8, 1.0), (" own", 1.0, 1.2), (" of", 1.2, 1.3), (" their", 1.3, 1.4)]
    assert at([*far, (" own", 1.4, 2.0)], 0.5) == 5  # the latest


def test_a_reopened_window_drops_the_committed_tail_heard_again_across_the_commit_point() -> None:
    """A reopened window's alignment can stretch the committed tail over the commit point (in the
    pause): "called a liner." heard again as "a" at 66.20-67.18 s and "liner." at 67.18 s with no
    audio, after a commit point at 66.50 s (conversation_test_4, said twice in its finals). Words
    that start before the commit point and say the committed tail again are that tail."""
    words = [(" what's", 0.0, 0.4), (" called", 0.4, 1.0), (" a", 1.0, 1.15), (" liner.", 1.15, 1.5)]
    p = CommitPolicy(TWO_SAY_IT)
    p.observe(hyp(words), 0.0, 2.0, endpoint=True)  # commit point 2.0, in the pause
    said = [*words[:2], (" a", 1.0, 2.3), (" liner.", 2.3, 2.3), (" And", 2.6, 2.9), (" used", 2.9, 3.1)]
    p.observe(hyp(said), 0.0, 3.6)
    assert texts(p.observe(hyp(said), 0.0, 3.6)) == [("Final", "And used")]
    # the same words after the commit point are said again: kept
    q = CommitPolicy(TWO_SAY_IT)
    q.observe(hyp(words), 0.0, 2.0, endpoint=True)
    again = [*words, (" a", 2.2, 2.4), (" liner.", 2.4, 2.8), (" And", 2.9, 3.0)]
    q.observe(hyp(again), 0.0, 3.6)
    assert texts(q.observe(hyp(again), 0.0, 3.6)) == [("Final", "a liner. And")]


# --- default guards: short windows, the commit margin, forced endpoints -----------------------

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
    p = CommitPolicy(PolicyConfig(min_commit_window_s=1.0, sure_hypotheses=2))
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
    config = PolicyConfig(commit_margin_s=margin, sure_margin_s=margin, min_commit_window_s=0.0, sure_hypotheses=2)
    p = CommitPolicy(config)
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
    doubted = [0.5] * len(AGREED)  # two hypotheses and the full margin
    p = CommitPolicy()
    assert texts(p.observe(hyp(AGREED, probabilities=doubted), 0.0, 3.0)) == [("Partial", "a b c d")]
    assert texts(p.observe(hyp(AGREED, probabilities=doubted), 0.0, 3.0)) == [("Final", "a b"), ("Partial", "c d")]
    # sure words followed by another: the first hypothesis and sure_margin_s (0.15)
    q = CommitPolicy()
    assert texts(q.observe(hyp(AGREED, probabilities=[0.95] * len(AGREED)), 0.0, 3.0)) == [
        ("Final", "a b c"),
        ("Partial", "d"),
    ]


@pytest.mark.parametrize(
    ("probabilities", "committed"),
    [
        ([0.9, 0.9, 0.9, 0.9], "a b"),  # c ends 0.2 s before the end: inside even the sure margin
        ([0.95, 0.5, 0.9, 0.9], "a"),  # b is doubted: the full margin
        ([0.95, 0.95, 0.95], "a b"),  # b is sure and followed by c
    ],
)
def test_a_sure_word_followed_by_another_needs_a_shorter_margin(probabilities: list[float], committed: str) -> None:
    config = PolicyConfig(
        commit_margin_s=0.6, sure_margin_s=0.3, sure_probability=0.9, min_commit_window_s=0.0, sure_hypotheses=2
    )
    words = AGREED[: len(probabilities)]
    p = CommitPolicy(config)
    p.observe(hyp(words, probabilities=probabilities), 0.0, 3.0)
    finals = [e.text for e in p.observe(hyp(words, probabilities=probabilities), 0.0, 3.0) if isinstance(e, Final)]
    assert finals == [committed]


@pytest.mark.parametrize(
    ("hypotheses", "probabilities", "committed"),
    [
        (1, [0.95, 0.95, 0.95, 0.95], ["a b"]),  # from the first hypothesis; c is within the sure margin
        (1, [0.95, 0.5, 0.95, 0.95], ["a"]),  # b is doubted: it waits for agreement, and c after it
        (1, [0.95, 0.95], ["a"]),  # b is sure but the last word: it waits
        (2, [0.95, 0.95, 0.95, 0.95], []),  # agreement, as for any word
    ],
)
def test_a_sure_word_needs_sure_hypotheses_to_say_it(
    hypotheses: int, probabilities: list[float], committed: list[str]
) -> None:
    config = PolicyConfig(
        commit_margin_s=0.6, sure_margin_s=0.3, min_commit_window_s=0.0, stall_commit_s=0.0, sure_hypotheses=hypotheses
    )
    p = CommitPolicy(config)
    events = p.observe(hyp(AGREED[: len(probabilities)], probabilities=probabilities), 0.0, 3.0)
    assert [e.text for e in events if isinstance(e, Final)] == committed


def test_sure_hypotheses_is_one_or_two() -> None:
    for bad in (0, 3):
        with pytest.raises(ConfigError, match="sure_hypotheses"):
            PolicyConfig(sure_hypotheses=bad)


def test_the_last_word_of_a_hypothesis_needs_the_full_margin() -> None:
    config = PolicyConfig(commit_margin_s=0.6, sure_margin_s=0.3, min_commit_window_s=0.0)
    p = CommitPolicy(config)
    two = AGREED[:2]  # b ends 0.55 s before the window's end and nothing follows it
    events = p.observe(hyp(two, probabilities=[0.99, 0.99]), 0.0, 3.0)
    events += p.observe(hyp(two, probabilities=[0.99, 0.99]), 0.0, 3.0)
    assert [e.text for e in events if isinstance(e, Final)] == ["a"]


def test_words_two_hypotheses_disagree_on_are_taken_as_the_latest_says_them_stall_commit_s_on() -> None:
    def run(config: PolicyConfig) -> list[list[tuple[str, str]]]:
        p = CommitPolicy(config)
        first = p.observe(hyp([(" uh", 0.2, 0.5), (" we", 0.5, 0.8), (" got", 0.8, 1.1)]), 0.0, 2.0)
        # the first word changes, so no word agrees; " a" and " we" end 1.5 s before this window's end
        second = p.observe(hyp([(" a", 0.2, 0.5), (" we", 0.5, 0.8), (" got", 0.8, 1.1), (" it", 1.5, 1.8)]), 0.0, 2.5)
        # " now" ends 1.5 s before the end too, but the hypothesis before did not hear it
        said = [(" got", 0.8, 1.1), (" it", 1.5, 1.8), (" now", 2.0, 2.3), (" here", 2.4, 2.7)]
        return [texts(first), texts(second), texts(p.observe(hyp(said), 0.0, 3.9))]

    # every word needs two hypotheses here
    assert run(PolicyConfig(sure_hypotheses=2)) == [
        [("Partial", "uh we got")],
        [("Final", "a we"), ("Partial", "got it")],
        [("Final", "got it"), ("Partial", "now here")],
    ]
    without = run(PolicyConfig(stall_commit_s=0.0, sure_hypotheses=2))
    assert without[1] == [("Partial", "a we got it")] and without[2] == [("Partial", "got it now here")]


def test_a_doubted_word_needs_a_third_hypothesis_when_asked() -> None:
    def run(config: PolicyConfig) -> list[list[tuple[str, str]]]:
        policy = CommitPolicy(config)
        words = [(" the", 0.0, 0.3), (" Danger", 0.3, 0.6), (" Trail", 0.6, 0.9), (" ran", 0.9, 1.2)]
        out = []
        for end in (2.0, 3.0, 4.0):
            h = hyp(words)
            # the model doubts "Trail" every time it says it
            h = dataclasses.replace(
                h, words=tuple(dataclasses.replace(w, probability=0.4 if "Trail" in w.word else 0.9) for w in h.words)
            )
            out.append(texts(policy.observe(h, 0.0, end)))
        return out

    # by default two hypotheses commit every word ...
    assert run(AGREEMENT)[1] == [("Final", "the Danger Trail ran")]
    # ... with commit_min_probability the doubted word and those after it wait for a third
    first, second, third = run(dataclasses.replace(AGREEMENT, commit_min_probability=0.6))
    assert first == [("Partial", "the Danger Trail ran")]
    assert second == [("Final", "the Danger"), ("Partial", "Trail ran")]
    assert third == [("Final", "Trail ran")]


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
    streamer = Streamer(config or StreamingConfig(), vad=SpanVad(spans))
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
    # The same speech with the defaults (at a 1 s step): the 1 s window commits nothing; the 2 s one
    # commits the sure words another follows on its own (sure_hypotheses 1); then the committed
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
            {"words": [(" Subtitles", 0.4, 1.5)], "hyp": {"avg_logprob": -1.7}},  # the pause's
            {"words": [(" Subtitles", 0.4, 1.5)], "hyp": {"avg_logprob": -1.7}},  # the endpoint's
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


@pytest.mark.parametrize("eager", [True, False])
@pytest.mark.parametrize("mark_probability", [0.5, 0.95])
def test_a_pause_final_keeps_its_full_stop_only_when_the_decoder_is_sure_of_it(
    mark_probability: float, eager: bool
) -> None:
    """A window that ends at a breath ends with a full stop ("impressions, from wood blocks."):
    a pause final (a client's short endpointing) keeps it when the decoder gave the mark a
    probability of pause_stop_min_probability (0.9) or more. A doubted one is dropped (``eager``,
    Flux's eager ends of turn), or the pause final commits nothing: the words stay pending, and
    the endpoint's final keeps the mark."""
    p = CommitPolicy(AGREEMENT)
    said = hyp([(" from", 0.1, 0.4), (" wood", 0.5, 0.8), (" blocks.", 0.9, 1.3)])
    last = dataclasses.replace(said.words[-1], mark_probability=mark_probability)
    p.observe(dataclasses.replace(said, words=(*said.words[:-1], last)), 0.0, 1.5)
    sure = mark_probability >= 0.9
    events = p.commit_pending(eager=eager)
    if not (sure or eager):
        assert events is None and len(p.pending) == 3
        events = p.close(1.5)
    (final,) = events or ()
    assert final.endpoint and final.text == ("from wood blocks" if eager and not sure else "from wood blocks.")
    assert p.prompt.endswith(final.words[-1].word)  # the committed text as the client has it


@pytest.mark.parametrize("mark_probability", [0.26, 0.95])
def test_agreement_leaves_a_last_word_with_a_doubted_full_stop_for_what_follows(mark_probability: float) -> None:
    """Two hypotheses whose windows end at a breath agree on "Strasburg." (each ends with a full
    stop): a stop the decoder is sure of is committed at once; a doubted one (below
    pause_stop_min_probability) keeps the word pending until a hypothesis hears what follows,
    and it is committed as that one says it ("Strasburg,"): no sentence mark at every breath."""
    p = CommitPolicy(AGREEMENT)

    def said(words: list[tuple[str, float, float]]) -> Any:  # (unsure words: two hypotheses commit)
        h = hyp(words, probabilities=[0.8] * len(words))
        last = dataclasses.replace(h.words[-1], mark_probability=mark_probability)
        return dataclasses.replace(h, words=(*h.words[:-1], last))

    p.observe(said([(" to", 0.1, 0.3), (" Strasburg.", 0.4, 1.0)]), 0.0, 1.5)
    events = p.observe(said([(" to", 0.1, 0.3), (" Strasburg.", 0.4, 1.0)]), 0.0, 2.0)
    sure = mark_probability >= 0.9
    assert [e.text for e in events if isinstance(e, Final)] == ["to Strasburg." if sure else "to"]
    events = p.observe(hyp([(" Strasburg,", 0.4, 1.0), (" Basil", 1.3, 1.6)], 0.3, probabilities=[0.8, 0.8]), 0.3, 2.5)
    assert [e.text for e in events if isinstance(e, Final)] == ([] if sure else ["Strasburg,"])
    assert p.prompt == (" to Strasburg." if sure else " to Strasburg,")


@pytest.mark.parametrize("endpoint_said", ["doubted", "nothing_new"])
def test_an_endpoint_whose_hypothesis_places_no_word_ends_with_the_words_said_before_it(endpoint_said: str) -> None:
    """A Home Assistant client's transcript of en_ps_librivox_sense_0890 once ended "... is to be":
    the hypotheses before the endpoint said "ill disposed." (its last word pending: a doubted
    full stop), and the endpoint's window, decoded in a crowded batch, said "old-sposed" with
    doubt (or its decoder ends at the committed words): that hypothesis is no vote against the
    words said before it, which end the utterance. A Wyoming request is answered at its first
    endpoint, so no reopened window would have heard them again."""
    p = CommitPolicy(AGREEMENT)
    words = [(" is", 0.1, 0.3), (" to", 0.3, 0.4), (" be", 0.4, 0.6), (" ill", 0.7, 0.9), (" disposed.", 0.9, 1.5)]

    def said(until: float) -> Any:
        h = hyp([w for w in words if w[2] <= until])
        last = dataclasses.replace(h.words[-1], mark_probability=0.4)
        return dataclasses.replace(h, words=(*h.words[:-1], last))

    finals = [e.text for n in (1.0, 1.5, 1.5) for e in p.observe(said(n), 0.0, n + 0.5) if isinstance(e, Final)]
    assert " ".join(finals) == "is to be ill" and [w.word for w in p.pending] == [" disposed."]
    if endpoint_said == "doubted":
        endpoint = hyp([(" old-sposed.", 0.7, 1.5)], probabilities=[0.2])
        events = p.observe(endpoint, 0.0, 2.2, endpoint=True)
    else:  # decoded after the committed words, it ends there
        events = p.observe(hyp([]), 0.0, 2.2, endpoint=True, prefix=" is to be ill")
    assert [(e.text, e.endpoint) for e in events if isinstance(e, Final)] == [("disposed.", True)]
    assert p.committed_end == 2.2


def test_a_pause_final_marks_the_endpoint_when_agreement_committed_every_word_first() -> None:
    """The pause's hypothesis agrees with the one before on every word: they become a plain
    final at once, and the pause still ends with an endpoint final (empty), which a Flux client
    reads as an EagerEndOfTurn and a Deepgram one as speech_final. A second pause with no final
    since marks nothing."""
    p = CommitPolicy(AGREEMENT)
    said = hyp([(" from", 0.1, 0.4), (" wood", 0.5, 0.8), (" blocks.", 0.9, 1.3)])
    p.observe(said, 0.0, 1.4)
    (final,) = [e for e in p.observe(said, 0.0, 1.6) if isinstance(e, Final)]
    assert final.text == "from wood blocks." and not final.endpoint and not p.pending
    (mark,) = p.commit_pending()
    assert mark.endpoint and mark.words == () and mark.start == mark.end == 1.3
    assert p.commit_pending() == []
