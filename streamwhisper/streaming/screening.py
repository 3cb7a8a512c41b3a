"""Screening a hypothesis: which of its words look like speech rather than a hallucination.

Whisper writes text where there is none (silence, music, noise: "Thank you.", "♪", a stock
outro), loops on short audio ("the the the ...", a sentence said twice) and may copy its prompt
when a window holds little new audio. Two kinds of guard catch this, both pure functions of what
they are given:

- :func:`screen` judges a hypothesis on its own: no-speech and log-probability limits, the
  words' probabilities, non-lexical captions, stock phrases, short samples at a fallback
  temperature and the compression ratio reject it whole; an n-gram loop is cut after its first
  occurrence;
- :func:`place_words` puts a window's words on the stream's clock and drops those already
  committed; with it, :func:`drop_copied_runs` and :func:`drop_repeated_tail` judge placed words
  against the words already committed: runs copied from the committed text (off by default: real
  speech repeats sentences too; see :func:`drop_prompt_copy` for a window that gave way), and
  a repeat of the committed tail right after the commit point, are dropped.

Words are compared in the form :func:`normalize_word` gives them.
"""

from __future__ import annotations

import logging
import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from streamwhisper.events import Word
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord

from .config import PolicyConfig

logger = logging.getLogger(__name__)

NON_LEXICAL = frozenset(
    {"oh", "ah", "uh", "um", "hmm", "mm", "mhm", "ha", "haha", "hahaha", "huh", "whoa", "wow", "ooh", "aah"}
)
SHORT_HYPOTHESIS_WORDS = 3
# A word the alignment gives less audio than this (one 20 ms step) was not heard in the window.
UNTIMED_WORD_S = 0.02
# Committed words a reopened window must say again, in order, to mark where its new words begin
# (see unheard_after): two, as a single word ("the") recurs too often.
REHEARD_MATCH_WORDS = 2
FULL_STOPS = ".。"


def normalize_word(word: str) -> str:
    """Comparison form of a word: case-folded, without punctuation, whitespace or controls."""
    return "".join(ch for ch in word.casefold() if unicodedata.category(ch)[0] not in "PZC")


def find_loop(
    words: Sequence[str], max_ngram: int, min_repeats: int, long_ngram: int = 0, after: int = 0
) -> int | None:
    """Index just after the first occurrence of the earliest repeated n-gram loop, or None;
    only loops whose first occurrence ends after the first ``after`` words count.

    A loop is an n-gram repeated ``min_repeats`` times back to back (``min_repeats + 1`` for a
    single word, since "no no no" is ordinary speech); an n-gram of ``long_ngram`` words or more
    (0: no such rule) needs only two: people repeat a word or two, not a whole phrase, while a
    decoder running past the end of short audio says its sentence again. That sentence may be
    longer than ``max_ngram`` ("ask not what your country can do for you", 9 words): the rule
    for phrases said twice looks at every length up to half the words.
    """
    best: int | None = None
    longest = max(max_ngram, len(words) // 2 if long_ngram else 0)
    for n in range(1, longest + 1):
        repeats = min_repeats + 1 if n == 1 else min_repeats
        if long_ngram and n >= long_ngram:
            repeats = 2
        elif n > max_ngram:
            continue
        for i in range(max(0, after - n + 1), len(words) - n * repeats + 1):
            if best is not None and i + n >= best:
                break
            if words[i + n] != words[i]:  # cheap first: most positions start no repeat
                continue
            gram = words[i : i + n]
            if all(words[i + k * n : i + (k + 1) * n] == gram for k in range(1, repeats)):
                best = i + n
                break
    return best


def is_non_lexical(words: Sequence[HypothesisWord]) -> bool:
    """A hypothesis of nothing but fillers, lone letters or sound-event captions.

    On music and noise Whisper writes "Oh, oh,", "W", "APPLAUSE", "(music)" or "♪": captions of
    sounds, not of speech.
    """
    for w in words:
        text = w.word.strip()
        key = normalize_word(text)
        if not key or key in NON_LEXICAL or (len(key) == 1 and key.isalpha() and key not in ("a", "i")):
            continue
        if text[:1] in "([♪*" or (text.isupper() and len(key) >= 4):
            continue
        return False
    return True


def glue_continuations(words: Sequence[HypothesisWord]) -> tuple[HypothesisWord, ...]:
    """The words, each that goes on from the word before it (:func:`_goes_on`: ",000" after
    " 600", "%" after " 12", "-0" in " 1-0-0", "..." after " but") joined to it.

    Whisper's word split starts a new word at every punctuation token and joins back only the
    closing marks of its list: a stream whose finals end between " 600" and ",000" would show
    "600 ,000", and a lone "%", with no letter or digit, was dropped as punctuation ("a 12
    chance"). The joined word's probability is its parts' mean. Words of scripts written without
    spaces begin with a letter and stay apart.
    """
    out: list[HypothesisWord] = []
    for w in words:
        if out and _goes_on(out[-1].word, w.word):
            last = out[-1]
            joined = last.word + w.word
            probability = (last.probability + w.probability) / 2  # (Whisper's: a mean over tokens)
            end, mark = max(last.end, w.end), w.mark_probability
            out[-1] = replace(last, word=joined, end=end, probability=probability, mark_probability=mark)
        else:
            out.append(w)
    return tuple(out)


def _goes_on(last: str, word: str) -> bool:
    """Whether ``word`` continues ``last``: no leading space, a mark or symbol first, and then
    nothing more ("%", "...") or digits after digits (",000", "-0"). A hyphen before letters
    ("ill" "-disposed") stays a word of its own: joined, the compound must agree whole in two
    hypotheses and is committed later (read_en: "ill-disposed" became "old supposed")."""
    first = word[:1]
    if not first or first.isspace() or first.isalnum():
        return False
    rest = normalize_word(word)
    return not rest or (rest[0].isdigit() and last[-1:].isdigit())


def mean_word_probability(words: Sequence[HypothesisWord | Word]) -> float:
    """The arithmetic mean of the words' probabilities; the geometric mean for a hypothesis of
    at most three words, where one doubted word is most of the text ("Thank:0.07 you.:0.96" on
    music: 0.26, where the arithmetic mean says 0.52)."""
    if len(words) <= SHORT_HYPOTHESIS_WORDS:
        return math.exp(sum(math.log(max(w.probability, 1e-9)) for w in words) / len(words))
    return sum(w.probability for w in words) / len(words)


def screen(
    hypothesis: Hypothesis,
    config: PolicyConfig,
    vouched: Callable[[Sequence[HypothesisWord]], bool] | None = None,
    prefix: str = "",
    endpoint: bool = False,
) -> tuple[tuple[HypothesisWord, ...], str]:
    """The usable words of a hypothesis and why the rest was dropped ('' when nothing was).

    Silence and a high compression ratio without a visible loop (as the recogniser's fallback
    rule judged them: ``silent``, ``looping``) and a log-probability below the floor reject the
    whole hypothesis; a
    repeated n-gram loop is cut after its first occurrence. A word that goes on from the one
    before it is joined to it (:func:`glue_continuations`); punctuation-only words left are dropped.
    ``vouched(words)``: whether the previous hypothesis already said these words; doubted words
    (a low mean probability) are kept when it did: a short window padded to 30 s lowers the
    model's confidence, not the words' truth; so are the few words of a hypothesis sampled at a
    fallback temperature. ``prefix``: the forced prefix's text, the committed words the window
    was decoded after: a phrase said twice is a loop also when its first occurrence began among
    them (the decoder ran past the audio saying the committed words and its own continuation
    again: "We got a recommendation for you on your" then "uh, join the VA. We got a
    recommendation for you on your, uh, join the VA."). ``endpoint``: the endpoint hypothesis of
    an utterance that has no other words (a short turn), whose doubted words no later window
    hears: kept when the model says the window is speech (``no_speech_prob`` below
    ``endpoint_doubt_max_no_speech``) and it holds no committed words (``prefix``).
    """
    if hypothesis.silent:
        return (), "no_speech"
    if hypothesis.avg_logprob < config.logprob_floor:
        return (), "low_logprob"
    if hypothesis.no_speech_prob > config.no_speech_hard_threshold:
        return (), "no_speech_hard"
    glued = glue_continuations(hypothesis.words)
    words = tuple(w for w in glued if normalize_word(w.word))
    before = [k for w in prefix.split() if (k := normalize_word(w))]
    keys = [*before, *(normalize_word(w.word) for w in words)]
    cut = find_loop(keys, config.loop_max_ngram, config.loop_min_repeats, config.loop_long_ngram, after=len(before))
    cut = None if cut is None else cut - len(before)
    # A loop reinforces itself (its repeats reach probability 0.8-0.9): judge what precedes it.
    judged = glued if cut is None else words[:cut]
    doubted = bool(judged) and mean_word_probability(judged) < config.min_mean_word_probability
    heard = endpoint and not prefix and hypothesis.no_speech_prob < config.endpoint_doubt_max_no_speech
    doubted = doubted and not heard
    if doubted and (vouched is None or not vouched(judged)):
        return (), "low_word_probability"
    if words and is_non_lexical(words):
        return (), "non_lexical"
    if " ".join(normalize_word(w.word) for w in words) in config.stock_phrases:
        return (), "stock_phrase"
    sampled_short = hypothesis.temperature > 0 and 0 < len(words) < config.sampled_min_words
    if sampled_short and (vouched is None or not vouched(words)):
        return (), "short_sample"
    if cut is not None:
        return words[:cut], "loop"
    if hypothesis.looping:
        return (), "compression_ratio"
    return words, ""


def drop_copied_runs(
    words: list[Word], committed: Sequence[Word], config: PolicyConfig, n: int | None = None, leading: bool = False
) -> list[Word]:
    """Drop runs of ``n`` (``copy_min_words``) or more words that repeat recently committed text;
    ``leading``: only the run that the words begin with.

    Whisper conditioned on a prompt sometimes copies it when the window holds little new
    audio; real speech seldom repeats that many words of the last sentences verbatim.
    ``committed``: the committed words, oldest first (the last ``copy_lookback_words`` count).
    """
    n = config.copy_min_words if n is None else n
    if not n or len(words) < n or len(committed) < n:
        return words
    recent = [normalize_word(w.word) for w in list(committed)[-config.copy_lookback_words :]]
    grams = {tuple(recent[i : i + n]) for i in range(len(recent) - n + 1)}
    keys = [normalize_word(w.word) for w in words]
    drop = [False] * len(words)
    for i in range(len(words) - n + 1):
        if leading and i and not drop[i]:
            break
        if tuple(keys[i : i + n]) in grams:
            drop[i : i + n] = [True] * n
    if any(drop):
        logger.debug("%d word(s) copy committed text", sum(drop))  # (drop_prompt_copy may keep them)
    return [w for w, d in zip(words, drop, strict=True) if not d]


def drop_prompt_copy(words: list[Word], committed: Sequence[Word], config: PolicyConfig) -> tuple[list[Word], str]:
    """The placed words of a window that gave way (its decoder said nothing after the committed
    words, so it starts at them) without the copy of its prompt they begin with
    (``restart_copy_min_words`` words or more), and 'prompt_copy' when that was all of them.

    That window hears only audio after the committed words, prompted with them: on the music
    after "Feels like these days go on forever." the decoder said "A4 said Guttenberg Bible."
    (committed 17 s before) again. A window whose words were all a copy heard nothing: like one
    whose words were doubted, it leaves its audio for the next window to hear.

    A copy later in the window is speech said again, unless the words beside it are doubted
    (their mean probability under ``min_mean_word_probability``): then the whole window is a
    copy dressed in noise, and the copy's own high probabilities, the decoder reading its
    prompt, are no evidence of audio (on laughter after "... glad to see you again, Phil.":
    "You:0.08 are:0.06 welcome,:0.09 I am glad to see you again.", whose mean passed at 0.51).
    """
    n = config.restart_copy_min_words
    kept = drop_copied_runs(words, committed, config, n, leading=True)
    rest = drop_copied_runs(kept, committed, config, n)
    if len(rest) < len(kept) and (not rest or mean_word_probability(rest) < config.min_mean_word_probability):
        kept = []
    return kept, "prompt_copy" if words and not kept else ""


def drop_repeated_tail(
    words: list[Word], committed: Sequence[Word], commit_point: float, config: PolicyConfig, min_words: int = 1
) -> list[Word]:
    """Drop leading words that repeat the committed tail right at the commit point.

    Words starting within ``dedupe_window_s`` of ``commit_point`` that say the last words of
    ``committed`` again (``min_words`` to ``dedupe_max_ngram`` of them) were heard at the edge
    of the window, or are the decoder repeating what it was given.
    """
    if not (words and committed) or words[0].start > commit_point + config.dedupe_window_s:
        return words
    tail = [normalize_word(w.word) for w in list(committed)[-config.dedupe_max_ngram :]]
    head = [normalize_word(w.word) for w in words[: config.dedupe_max_ngram]]
    for n in range(min(len(tail), len(head)), min_words - 1, -1):
        if tail[-n:] == head[:n]:
            logger.debug("dropped %d word(s) repeating the committed tail", n)
            return words[n:]
    return words


def place_words(
    words: Sequence[HypothesisWord],
    window_start: float,
    window_end: float,
    prefixed: bool,
    *,
    tail: Sequence[Word],
    committed_end: float,
    soft_boundary: bool,
    config: PolicyConfig,
    unsaid: bool = False,
) -> tuple[list[Word], dict[Word, float]]:
    """A window's words, absolute, monotonic, clamped to the window and not yet committed, and
    each one's closing mark's probability. ``tail``: the committed words (the commit point at
    ``committed_end``; ``soft_boundary``: it lies inside continuous speech); ``prefixed``: the
    window was decoded after the committed words it holds, which are not in ``words``; ``unsaid``:
    it was not, and the utterance of the committed words closed without a hypothesis of its end
    (see :func:`unheard_after`)."""
    out: list[Word] = []
    marks: dict[Word, float] = {}
    commit = committed_end
    last = tail[-1] if tail else None
    resume = unheard_after(words, window_start, tail, committed_end, config) if unsaid else None
    # (words after the committed ones: from the last committed word's end, for monotonic finals)
    prev_end = last.end if resume is not None and last is not None else commit
    across = False  # the first new word of a reopened window starts before the commit point
    for i, w in enumerate(words):
        start, end = window_start + w.start, window_start + w.end
        if start >= window_end:  # decoded into the padding after the audio
            break
        recheck = not prefixed and (resume is None or i < resume)  # (words from resume on are new)
        if recheck and (end <= commit or heard_again(w.word, start, end, None if out else last, commit)):
            continue  # audio already committed
        across = across or (not out and not prefixed and start < commit)
        start = min(max(start, prev_end), window_end)
        end = min(max(end, start), window_end)
        out.append(Word(w.word, round(start, 3), round(end, 3), w.probability))
        marks[out[-1]] = w.mark_probability
        prev_end = end
    out = drop_copied_runs(out, tail, config)
    # A reopened window's alignment can stretch the committed tail over the commit point, which
    # then follows a pause: "a" at 66.20-67.18 s and "liner." at 67.18 s after "called a liner."
    # committed to 66.50 s. Otherwise, after a pause, nothing is repeated.
    if not (soft_boundary or across):
        return out, marks
    # After a forced prefix the decoder starts right after the committed words, so words
    # repeating them are the decoder saying its last phrase again (two words at least: a
    # single repeated word may be a real "the the").
    return drop_repeated_tail(out, tail, committed_end, config, min_words=2 if prefixed else 1), marks


def unheard_after(
    words: Sequence[HypothesisWord],
    window_start: float,
    tail: Sequence[Word],
    committed_end: float,
    config: PolicyConfig,
) -> int | None:
    """In a window decoded without a prefix, reopened over committed words: the index of the first
    word after those words said again, when words timed before the commit point follow them; None
    when none do, or the committed words are not said again.

    The utterance before closed on a pause's hypothesis whose decoder stopped before its last
    words ("... part of their" committed, "productions, whatever they were." unsaid); its endpoint
    moved the commit point past them, and by time alone the reopened window's "part of their
    productions, whatever they were. The Middle Ages ..." would lose them. The committed words in
    the window said first, or else the last ``REHEARD_MATCH_WORDS`` committed words said about
    where they were committed (within ``dedupe_window_s``), mark where the new words begin."""
    before = 0  # the words timed before the commit point (in order)
    while before < len(words) and window_start + words[before].end <= committed_end:
        before += 1
    heard = [normalize_word(w.word) for w in words[:before]]
    inside = [normalize_word(w.word) for w in tail if w.end > window_start]
    if inside and heard[: len(inside)] == inside:
        return len(inside) if len(inside) < before else None
    n = REHEARD_MATCH_WORDS
    if len(tail) < n:
        return None
    said = [normalize_word(tail[i].word) for i in range(len(tail) - n, len(tail))]
    for j in range(before - 1, n - 2, -1):  # j: the last word of the match, the latest match first
        if heard[j - n + 1 : j + 1] == said:
            near = window_start + words[j - n + 1].start >= tail[-n].start - config.dedupe_window_s
            return j + 1 if near and j + 1 < before else None
    return None


def without_unsure_stop(words: Sequence[Word], marks: Mapping[Word, float], floor: float) -> list[Word]:
    """The words, the full stop after the last one dropped when the decoder gave that mark a
    probability below ``floor`` (``marks``: each word's, 1.0 when absent). A window that ends
    at a breath ends with a full stop, which a final sent at the breath would keep."""
    words = list(words)
    last = words[-1] if words else None
    if last is None or marks.get(last, 1.0) >= floor or not last.word.rstrip(FULL_STOPS).strip():
        return words
    return [*words[:-1], replace(last, word=last.word.rstrip(FULL_STOPS))]


def heard_again(word: str, start: float, end: float, last: Word | None, committed_end: float) -> bool:
    """Whether ``word`` (at ``start``-``end`` s), the first new one of a window decoded without a
    prefix (reopened over committed words), is ``last``, the last committed word, again: timed
    across the commit point, or given no audio by the alignment ("thanks." at 116.06 s)."""
    timed_across = start < committed_end or end - start < UNTIMED_WORD_S
    return last is not None and timed_across and normalize_word(word) == normalize_word(last.word)
