"""Screening hypotheses: no-speech and probability guards, loops, non-lexical captions, stock
phrases, doubted words vouched for by the previous hypothesis, copies of the committed text."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from fakes import AGREEMENT, hyp, texts

from streamwhisper.events import Final, Word
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord
from streamwhisper.streaming.agreement import CommitPolicy
from streamwhisper.streaming.config import PolicyConfig
from streamwhisper.streaming.screening import find_loop, glue_continuations, normalize_word, screen, without_unsure_stop

# --- screen: a hypothesis on its own --------------------------------------------------------


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


@pytest.mark.parametrize("n", [3, 8, 9, 12, 30])
def test_find_loop_a_sentence_of_any_length_twice(n: int) -> None:
    # longer than max_ngram too: "ask not what your country can do for you" is 9 words
    sentence = [f"w{i}" for i in range(n)]
    assert find_loop(["so", *sentence, *sentence], max_ngram=8, min_repeats=3, long_ngram=3) == n + 1
    assert find_loop(["so", *sentence, *sentence], max_ngram=8, min_repeats=3) == (None if n > 1 else 2)
    assert find_loop([*sentence, "and", *sentence], max_ngram=8, min_repeats=3, long_ngram=3) is None


def test_find_loop_after_a_prefix_counts_only_loops_that_end_after_it() -> None:
    words = ["a", "b", "c", "d", "e", "a", "b", "c", "d", "e"]
    assert find_loop(words, max_ngram=8, min_repeats=3, long_ngram=3, after=3) == 5  # begun in the prefix
    assert find_loop(words, max_ngram=8, min_repeats=3, long_ngram=3, after=5) is None  # said before it
    assert find_loop([*["x", "x", "x", "x"], *words], max_ngram=8, min_repeats=3, long_ngram=3, after=5) == 9


def timed(text: str) -> list[tuple[str, float, float]]:
    """Each word of ``text`` said in 0.3 s, one after another from 0."""
    return [(f" {w}", 0.3 * i, 0.3 * i + 0.3) for i, w in enumerate(text.split())]


def test_a_phrase_begun_in_the_forced_prefix_and_said_again_is_a_loop() -> None:
    """Apollo 11's air-to-ground loop (hard, replayed at 0.3 s a request): after the committed
    "We got a recommendation for you on your", the window's last hypothesis went on "uh, join the
    VA." and said all of it again, the repeat squeezed into the window's last 0.6 s; the final
    said the sentence twice. Said again after it was all committed, a phrase is speech."""
    committed = " We got a recommendation for you on your"
    new = "uh, join the VA. We got a recommendation for you on your, uh, join the VA."
    looped = hyp(timed(new))
    words, reason = screen(looped, PolicyConfig(), prefix=committed)
    assert reason == "loop" and [w.word for w in words] == [" uh,", " join", " the", " VA."]
    assert screen(looped, PolicyConfig())[1] == ""  # the new words alone repeat nothing back to back
    again = hyp(timed("Okay, no problem, we'll see."))
    assert screen(again, PolicyConfig(), prefix=" Okay, no problem.") == (again.words, "")
    # through the policy: the request's prefix text
    p = CommitPolicy(PolicyConfig(min_commit_window_s=0.0))
    p.observe(hyp(timed(committed)), 0.0, 3.0, endpoint=True)
    later = [(w.word, 2.4 + w.start, 2.7 + w.start) for w in looped.words]
    events = p.observe(hyp(later), 0.0, 8.0, endpoint=True, prefix=committed)
    assert texts(events) == [("Final", "uh, join the VA.")]


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
    p = CommitPolicy(PolicyConfig())
    assert p.observe(hyp(thanks, temperature=0.4), 0.0, 2.0) == []
    assert texts(p.observe(hyp(thanks), 0.0, 2.5)) == [("Final", "Thank"), ("Partial", "you.")]  # sure: at once
    assert texts(p.observe(hyp(thanks, temperature=0.4), 0.0, 3.0, endpoint=True)) == [("Final", "you.")]


def test_a_loop_is_judged_by_the_words_before_it() -> None:
    """A loop's repeats are confident (it feeds itself); the words before it decide."""
    loop = [(w, 2.0 + 0.2 * i, 2.2 + 0.2 * i) for i, w in enumerate([" a", " little", " bit", " of"] * 5)]
    said = [(" I'm", 0.0, 0.4), (" going", 0.4, 0.8), (" to", 0.8, 1.2), (" do", 1.2, 2.0)]
    sure = hyp(said + loop)
    doubted = hyp(said + loop, probabilities=[0.14, 0.3, 0.93, 0.04, 0.17, 0.19, 0.3, 0.45] + [0.85] * 16)
    assert screen(doubted, PolicyConfig()) == ((), "low_word_probability")  # dishes clattering
    words, reason = screen(sure, PolicyConfig())
    assert reason == "loop" and " ".join(w.word.strip() for w in words) == "I'm going to do a little bit of"


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
    low = Hypothesis(
        " hello there", (), words, avg_logprob=-0.2, no_speech_prob=0.01, compression_ratio=1.0, language="en"
    )
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
            ("Final", "for"),
            ("Partial", "you."),
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
    # ... doubted words the previous hypothesis did not say are dropped: the words it said, sure
    # of them, end the utterance (the endpoint's hypothesis is no vote against them)
    policy = said_for_you()
    events = policy.observe(
        _doubted([(" thank", 7.3, 7.5), (" you.", 7.5, 7.7)], offset=7.26), 7.26, 8.16, endpoint=True
    )
    assert [(e.text, e.start) for e in events if isinstance(e, Final)] == [("you.", 7.3)]
    # ... and with nothing said before, doubt drops the hypothesis when the model doubts that
    # the window is speech at all ("Okay.:0.23" on music, no_speech_prob 0.16-0.55)
    music = dataclasses.replace(_doubted([(" you.", 0.3, 0.7)]), no_speech_prob=0.3)
    events = CommitPolicy(PolicyConfig()).observe(music, 0.0, 1.0, endpoint=True)
    assert not [e for e in events if isinstance(e, Final) and e.text]


def test_a_short_turn_the_model_doubts_but_calls_speech_is_final_at_its_endpoint() -> None:
    # "Ten:0.45 of:0.99 clothes.:0.27" for "ten of clubs", a 1 s turn after a long pause: the
    # only hypotheses of the utterance, dropped as doubted, left the turn without a final
    turn = _doubted([(" Ten", 20.3, 20.5), (" of", 20.5, 20.6), (" clubs.", 20.6, 20.9)], offset=20.0)
    assert turn.no_speech_prob < PolicyConfig().endpoint_doubt_max_no_speech
    policy = CommitPolicy(PolicyConfig())
    assert not [e for e in policy.observe(turn, 20.0, 21.4) if isinstance(e, Final)]  # not yet the endpoint
    finals = [e for e in policy.observe(turn, 20.0, 21.7, endpoint=True) if isinstance(e, Final)]
    assert [(f.text, f.endpoint) for f in finals] == [("Ten of clubs.", True)]
    # ... not with the rule off, nor for words decoded after a prefix (no_speech_prob then
    # speaks for the committed words)
    off = CommitPolicy(PolicyConfig(endpoint_doubt_max_no_speech=0.0))
    assert not [e for e in off.observe(turn, 20.0, 21.7, endpoint=True) if isinstance(e, Final) and e.text]
    kept, reason = screen(turn, PolicyConfig(), prefix=" He said", endpoint=True)
    assert (kept, reason) == ((), "low_word_probability")
    assert screen(turn, PolicyConfig(), endpoint=True)[1] == ""


def test_a_short_hypothesis_with_one_doubted_word_is_dropped() -> None:
    # "Thank you." on music: the arithmetic mean (0.52) passes the 0.5 floor, the geometric
    # mean of a hypothesis of three words or fewer (0.26) does not.
    words = (HypothesisWord(" Thank", 0.0, 0.4, 0.07), HypothesisWord(" you.", 0.4, 0.8, 0.96))
    thanks = Hypothesis(
        " Thank you.", (), words, avg_logprob=-0.8, no_speech_prob=0.3, compression_ratio=1.0, language="en"
    )
    assert screen(thanks, PolicyConfig()) == ((), "low_word_probability")
    # a longer hypothesis keeps the arithmetic mean: one doubted word does not drop a sentence
    longer = words + tuple(HypothesisWord(f" w{i}", 1.0 + i, 1.5 + i, 0.6) for i in range(3))
    kept, reason = screen(dataclasses.replace(thanks, words=longer), PolicyConfig())
    assert reason == "" and len(kept) == 5


# --- words repeating the committed text ------------------------------------------------------

SAID = [(f" {w}", 0.5 + 0.4 * i, 0.8 + 0.4 * i) for i, w in enumerate(["one", "two", "three", "four", "five", "six"])]


COPY_GUARD = dataclasses.replace(AGREEMENT, copy_min_words=5)  # off by default


def committed_six(config: PolicyConfig = COPY_GUARD) -> CommitPolicy:
    """A policy that committed "one two three four five six" (ending at 2.8 s)."""
    p = CommitPolicy(config)
    p.observe(hyp(SAID), 0.0, 3.0)
    assert texts(p.observe(hyp(SAID), 0.0, 3.0)) == [("Final", "one two three four five six")]
    return p


def later(words: str, start: float = 3.0) -> list[tuple[str, float, float]]:
    return [(f" {w}", start + 0.4 * i, start + 0.4 * i + 0.3) for i, w in enumerate(words.split())]


def test_a_run_of_five_committed_words_is_dropped_as_a_prompt_copy() -> None:
    assert (PolicyConfig().copy_min_words, PolicyConfig().copy_lookback_words) == (0, 32)
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
    events = p.observe(hyp(later("two three four five six seven")), 0.0, 6.0, prefix=" one two three four five six")
    assert texts(events) == [("Partial", "seven")]


def test_a_prefixed_window_repeating_the_last_committed_words_drops_them() -> None:
    p = committed_six()
    # After the forced prefix the decoder says its last phrase again: that is not new speech.
    events = p.observe(hyp(later("five six seven")), 0.0, 6.0, prefix=" one two three four five six")
    assert texts(events) == [("Partial", "seven")]
    # One repeated word may be speech ("the the"): kept.
    q = committed_six()
    events = q.observe(hyp(later("six seven")), 0.0, 6.0, prefix=" one two three four five six")
    assert texts(events) == [("Partial", "six seven")]


def test_copy_guard_lookback_and_switch() -> None:
    # Committed words older than copy_lookback_words are not compared.
    p = committed_six(dataclasses.replace(COPY_GUARD, copy_lookback_words=5))
    events = p.observe(hyp(later("one two three four five eight"), 2.8), 2.8, 6.0)
    assert texts(events) == [("Partial", "one two three four five eight")]
    p = committed_six(AGREEMENT)  # 0, the default, disables the guard
    events = p.observe(hyp(later("seven two three four five six eight"), 2.8), 2.8, 6.0)
    assert texts(events) == [("Partial", "seven two three four five six eight")]


def forever_committed(config: PolicyConfig = AGREEMENT) -> CommitPolicy:
    """conversation_tune_3 to 36.48 s: "Feels like these days go on forever." committed after the
    earlier "the A4 said Guttenberg Bible, is printed ..." (the words' times made up)."""
    text = (
        "the A4 said Guttenberg Bible, is printed in letters which are an exact imitation."
        " Go forward 10 meters. Feels like these days go on forever."
    )
    p = CommitPolicy(config)
    said = later(text, 26.58)
    p.observe(hyp(said, 26.5), 26.5, 37.0)
    p.observe(hyp(said, 26.5), 26.5, 37.0)
    assert p.committed_end == 36.48 and p.pending == ()
    p.restart(36.48)  # the window 33.54-37.69 s said nothing after its prefix: windows start here
    return p


# The window that gave way, from the commit point (recorded: 36.48-38.19 s, no prefix, music
# after the speech), and the words its decoder said there.
COPIED = [(" A4", 36.48, 36.84), (" said", 36.84, 36.94), (" Guttenberg", 36.94, 37.02), (" Bible.", 37.02, 38.16)]


def test_a_window_that_gave_way_drops_the_prompt_it_starts_with() -> None:
    assert PolicyConfig().restart_copy_min_words == 3
    p = forever_committed()
    assert texts(p.observe(hyp(COPIED, 36.48), 36.48, 38.19)) == []
    # What follows the copy is heard.
    events = p.observe(hyp([*COPIED, (" But", 40.9, 41.1), (" the", 41.1, 41.3)], 36.48), 36.48, 41.5)
    assert texts(events) == [("Partial", "But the")]


def test_an_endpoint_that_only_copied_its_prompt_leaves_its_audio_to_the_next_window() -> None:
    p = forever_committed()
    assert texts(p.observe(hyp(COPIED, 36.48), 36.48, 38.19, endpoint=True)) == [("Final", "")]
    # As when its words are doubted: the next utterance's window may reopen over that audio.
    assert p.committed_end == 36.48 and p.reopen_point(38.5, 1.0, 3.0) == 36.48
    q = forever_committed()  # words heard: the commit point moves to the endpoint
    q.observe(hyp([(" But", 36.6, 36.9)], 36.48), 36.48, 38.19, endpoint=True)
    assert q.committed_end == 38.19 and q.reopen_point(38.5, 1.0, 3.0) > 36.48


def test_a_copy_is_kept_elsewhere() -> None:
    # Off (0): the copy is heard as words.
    p = forever_committed(dataclasses.replace(AGREEMENT, restart_copy_min_words=0))
    assert texts(p.observe(hyp(COPIED, 36.48), 36.48, 38.19)) == [("Partial", "A4 said Guttenberg Bible.")]
    # A window that opens elsewhere did not give way.
    p = forever_committed()
    later_copy = [(w, s + 0.5, e + 0.5) for w, s, e in COPIED]
    assert texts(p.observe(hyp(later_copy, 36.98), 36.98, 38.69)) == [("Partial", "A4 said Guttenberg Bible.")]
    # Only the run the window starts with: a phrase said again later in it is speech.
    p = forever_committed()
    events = p.observe(hyp([(" Yes,", 36.5, 36.8), *[(w, s + 0.4, e + 0.4) for w, s, e in COPIED]], 36.48), 36.48, 38.9)
    assert texts(events) == [("Partial", "Yes, A4 said Guttenberg Bible.")]
    # ... unless the words beside it are doubted: the decoder copied its prompt over noise
    # (recorded: laughter after "... glad to see you again, Phil.", the probabilities its own).
    doubted = [(" You", 36.5, 36.7, 0.08), (" are", 36.7, 36.9, 0.06), (" welcome,", 36.9, 37.2, 0.09)]
    for probability, heard in ((0.9, "You are welcome, A4 said Guttenberg Bible."), (None, None)):
        said = [(w, s, e, probability or p) for w, s, e, p in doubted]
        said += [(w, s + 0.8, e + 0.8, 0.95) for w, s, e in COPIED]
        p = forever_committed()
        events = p.observe(hyp([w[:3] for w in said], 36.48, probabilities=[w[3] for w in said]), 36.48, 39.1)
        assert texts(events) == ([("Partial", heard)] if heard else [])
    # Two copied words are not a run.
    p = forever_committed()
    assert texts(p.observe(hyp(COPIED[1:3], 36.48), 36.48, 38.19)) == [("Partial", "said Guttenberg")]


def test_only_a_doubted_full_stop_is_dropped_from_a_pause_final() -> None:
    word = Word(" blocks.", 0.9, 1.3, 0.9)
    other = Word(" wood", 0.5, 0.8, 0.9)
    assert [w.word for w in without_unsure_stop([other, word], {word: 0.5}, 0.9)] == [" wood", " blocks"]
    assert without_unsure_stop([other, word], {word: 0.95}, 0.9) == [other, word]
    assert without_unsure_stop([other, word], {}, 0.9) == [other, word]  # no probability: kept
    question = Word(" blocks?", 0.9, 1.3, 0.9)  # a question mark is the decoder's choice, not the audio's end
    assert without_unsure_stop([question], {question: 0.2}, 0.9) == [question]
    alone = Word(" .", 0.9, 1.3, 0.9)  # a word that is only the mark stays whole
    assert without_unsure_stop([alone], {alone: 0.2}, 0.9) == [alone]
    assert without_unsure_stop([], {}, 0.9) == []


def test_a_word_that_goes_on_from_the_one_before_is_joined_to_it() -> None:
    # recorded (read_en, the picovoice clip): "not 600 ,000" and "a 12 chance" in the finals
    said = [(" not", 0.0, 0.2), (" 600", 0.2, 0.6), (",000", 0.6, 0.9), (" a", 1.0, 1.1), (" 12", 1.1, 1.4)]
    said += [("%", 1.4, 1.5), (" chance.", 1.5, 1.9), (" 1", 2.0, 2.2), ("-0", 2.2, 2.4), ("-3.", 2.4, 2.6)]
    said += [(" But", 2.7, 2.9), ("...", 2.9, 3.0), (" ill", 3.0, 3.2), ("-disposed.", 3.2, 3.6)]
    words, reason = screen(hyp(said), AGREEMENT)
    assert reason == ""
    joined = [" not", " 600,000", " a", " 12%", " chance.", " 1-0-3.", " But...", " ill", "-disposed."]
    assert [w.word for w in words] == joined  # (a hyphen before letters: a word of its own)
    assert (words[1].start, words[1].end, words[3].end) == (0.2, 0.9, 1.5)
    # The parts' mean probability: "5:0.41 -5:0.62" (en_ps_cards_004) is not one doubted "5".
    five = [HypothesisWord(" 5", 0.0, 0.4, 0.41), HypothesisWord("-5", 0.4, 0.8, 0.62)]
    assert glue_continuations(five) == (HypothesisWord(" 5-5", 0.0, 0.8, 0.515),)
    # Scripts without spaces: every word begins with a letter and stays apart.
    chinese = hyp([("我们", 0.0, 0.4), ("今天", 0.4, 0.8), ("去。", 0.8, 1.0)]).words
    assert glue_continuations(chinese) == chinese
