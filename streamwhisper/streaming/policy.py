"""From hypotheses to ``Partial`` and ``Final`` events: guards, LocalAgreement-2 and endpoints.

Pure and clock-free: the caller says which window (on the audio clock, in seconds) each
hypothesis describes. Invariants the policy keeps:

- finals are append-only: every committed word ends after the previous one (the *commit point*
  ``committed_end`` only moves forward) and is never emitted twice;
- a word is committed when two consecutive hypotheses agree on it (normalised text, as a
  common prefix of their uncommitted words) and it ends clear of the window's end, at an
  endpoint, or by :meth:`force_commit`;
- while a window still holds committed words, the caller decodes it with those words as a
  forced prefix (:meth:`context`), so the model continues after them: nothing is duplicated
  or lost at the commit point and no word is cut in two;
- when the caller trims its audio at ``committed_end`` (a long utterance), the next window
  starts where the last committed word ends; words of that window ending at or before the
  commit point, or repeating the committed tail right at the boundary, are dropped.
"""

from __future__ import annotations

import logging
import math
import unicodedata
from collections import deque
from collections.abc import Callable, Sequence

from streamwhisper.events import Event, Final, Partial, Word
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord

from .config import PolicyConfig

logger = logging.getLogger(__name__)

EncodeText = Callable[[str], Sequence[int]]
CUT_MARGIN_S = 0.04  # two of Whisper's 20 ms timestamp steps
TAIL_WORDS = 256  # committed words kept: more than a 30 s window can hold
# A window holds whole mel frames, one short of its audio (2 s of audio is a 1.99 s window):
# the 2 s window meets min_commit_window_s = 2 (without the slack the first commit waited for
# the next step: read_en final latency p95 2.3 s instead of 1.8 s at a 0.5 s step).
WINDOW_SLACK_S = 0.05
# Marks that end a clause or sentence (Latin and CJK): left off the end of a forced prefix.
CLAUSE_END_PUNCTUATION = ".,;:!?…。，、；：！？"


def normalize_word(word: str) -> str:
    """Comparison form of a word: case-folded, without punctuation, whitespace or controls."""
    return "".join(ch for ch in word.casefold() if unicodedata.category(ch)[0] not in "PZC")


def find_loop(words: Sequence[str], max_ngram: int, min_repeats: int, long_ngram: int = 0) -> int | None:
    """Index just after the first occurrence of the earliest repeated n-gram loop, or None.

    A loop is an n-gram repeated ``min_repeats`` times back to back (``min_repeats + 1`` for a
    single word, since "no no no" is ordinary speech); an n-gram of ``long_ngram`` words or more
    (0: no such rule) needs only two: people repeat a word or two, not a whole phrase, while a
    decoder running past the end of short audio says its sentence again.
    """
    best: int | None = None
    for n in range(1, max_ngram + 1):
        repeats = min_repeats + 1 if n == 1 else min_repeats
        if long_ngram and n >= long_ngram:
            repeats = 2
        for i in range(len(words) - n * repeats + 1):
            if best is not None and i + n >= best:
                break
            gram = words[i : i + n]
            if all(words[i + k * n : i + (k + 1) * n] == gram for k in range(1, repeats)):
                best = i + n
                break
    return best


NON_LEXICAL = frozenset({"oh", "ah", "uh", "um", "hmm", "mm", "mhm", "ha", "haha", "hahaha", "huh", "whoa", "wow", "ooh", "aah"})


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


SHORT_HYPOTHESIS_WORDS = 3


def mean_word_probability(words: Sequence[HypothesisWord]) -> float:
    """The arithmetic mean of the words' probabilities; the geometric mean for a hypothesis of
    at most three words, where one doubted word is most of the text ("Thank:0.07 you.:0.96" on
    music: 0.26, where the arithmetic mean says 0.52)."""
    if len(words) <= SHORT_HYPOTHESIS_WORDS:
        return math.exp(sum(math.log(max(w.probability, 1e-9)) for w in words) / len(words))
    return sum(w.probability for w in words) / len(words)


def screen(
    hypothesis: Hypothesis, config: PolicyConfig, vouched: Callable[[Sequence[HypothesisWord]], bool] | None = None
) -> tuple[tuple[HypothesisWord, ...], str]:
    """The usable words of a hypothesis and why the rest was dropped ('' when nothing was).

    Silence (high ``no_speech_prob`` with low ``avg_logprob``), a log-probability below the
    floor and a high compression ratio without a visible loop reject the whole hypothesis; a
    repeated n-gram loop is cut after its first occurrence. Punctuation-only words are dropped.
    ``vouched(words)``: whether the previous hypothesis already said these words; doubted words
    (a low mean probability) are kept when it did: a short window padded to 30 s lowers the
    model's confidence, not the words' truth; so are the few words of a hypothesis sampled at a
    fallback temperature.
    """
    if hypothesis.no_speech_prob > config.no_speech_threshold and hypothesis.avg_logprob < config.no_speech_logprob:
        return (), "no_speech"
    if hypothesis.avg_logprob < config.logprob_floor:
        return (), "low_logprob"
    if hypothesis.no_speech_prob > config.no_speech_hard_threshold:
        return (), "no_speech_hard"
    words = tuple(w for w in hypothesis.words if normalize_word(w.word))
    cut = find_loop(
        [normalize_word(w.word) for w in words], config.loop_max_ngram, config.loop_min_repeats, config.loop_long_ngram
    )
    # A loop reinforces itself (its repeats reach probability 0.8-0.9): judge what precedes it.
    judged = hypothesis.words if cut is None else words[:cut]
    if judged and mean_word_probability(judged) < config.min_mean_word_probability:
        if vouched is None or not vouched(judged):
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
    if hypothesis.compression_ratio > config.compression_ratio_threshold:
        return (), "compression_ratio"
    return words, ""


def _text(words: Sequence[Word]) -> str:
    return "".join(w.word for w in words).strip()


class CommitPolicy:
    """Turns a stream of hypotheses into partials and append-only finals.

    Args:
        config: guard thresholds, boundary de-duplication and prompt settings.
        encode_text: the recogniser's tokenizer; without it the prompt stays empty.
    """

    def __init__(self, config: PolicyConfig | None = None, encode_text: EncodeText | None = None) -> None:
        self._config = config or PolicyConfig()
        self._encode = encode_text
        self._committed_end = 0.0
        # The committed tail feeds the prompt, the forced prefix (committed words still in the
        # window), the copy guard and boundary de-duplication. Each word is at least one token,
        # so max_prompt_tokens words always cover the prompt.
        cfg = self._config
        self._tail: deque[Word] = deque(
            maxlen=max(TAIL_WORDS, cfg.max_prompt_tokens, cfg.copy_lookback_words, cfg.dedupe_max_ngram)
        )
        self._soft_boundary = False  # the commit point lies inside continuous speech
        self._pending: list[Word] = []  # uncommitted words of the latest hypothesis
        self._seen: list[int] = []  # for each pending word, how many hypotheses in a row said it
        self._shown = ""  # text of the partial the client currently shows
        self._finals_in_utterance = 0
        self._seq = 0
        self._utterance_start: float | None = None  # window start of the utterance's first hypothesis
        self._prompt: tuple[int, ...] = ()
        self._closed_prompt: tuple[int, ...] = ()  # the prompt as a finished sentence

    @property
    def committed_end(self) -> float:
        """The commit point: end of the last committed word or of skipped audio (seconds)."""
        return self._committed_end

    @property
    def prompt(self) -> tuple[int, ...]:
        """Token ids of the last committed text (at most ``max_prompt_tokens``)."""
        return self._prompt

    @property
    def pending(self) -> tuple[Word, ...]:
        """Uncommitted words of the latest hypothesis (what the partial shows)."""
        return tuple(self._pending)

    def observe(
        self,
        hypothesis: Hypothesis,
        window_start: float,
        window_end: float,
        *,
        endpoint: bool = False,
        prefixed: bool = False,
        speech_goes_on: bool = False,
    ) -> list[Event]:
        """Take the hypothesis of the window ``[window_start, window_end)``.

        ``prefixed``: the window was decoded after the committed words it holds (a forced
        prefix), so the hypothesis holds only new words and needs no boundary de-duplication.

        Without ``endpoint``, words agreed with the previous hypothesis become a ``Final`` and
        the rest a ``Partial``. With ``endpoint`` the utterance ends: every remaining word of
        this hypothesis becomes final and the commit point moves to ``window_end``.
        """
        words, reason = screen(hypothesis, self._config, lambda ws: self._vouched(ws, window_start, window_end, prefixed))
        logger.debug(
            "hypothesis at %.2f-%.2f s%s%s: %r", window_start, window_end, " (prefixed)" if prefixed else "",
            " (endpoint)" if endpoint else "", " ".join(f"{w.word.strip()}:{w.probability:.2f}" for w in hypothesis.words),
        )
        if reason:
            logger.debug("hypothesis at %.2f-%.2f s screened: %s", window_start, window_end, reason)
        placed = self._place(words, window_start, window_end, prefixed)
        if endpoint:
            if speech_goes_on:
                # A word reaching a forced endpoint is cut in two there ("what" heard as "why"):
                # the next utterance, which starts before the endpoint, hears it whole.
                while placed and placed[-1].end >= window_end - CUT_MARGIN_S:
                    placed.pop()
            self._pending, self._seen = placed, [1] * len(placed)
            return self.close(window_end, speech_goes_on=speech_goes_on)
        cfg = self._config
        # Hypotheses of the first seconds of an utterance are guesses (Whisper needs context):
        # no commits until it is min_commit_window_s long (a trimmed window keeps its prompt).
        if self._utterance_start is None:
            self._utterance_start = window_start
        can_commit = window_end - self._utterance_start + WINDOW_SLACK_S >= cfg.min_commit_window_s
        seen: list[int] = []  # how many hypotheses in a row said each word (the same words before it)
        for i, new in enumerate(placed):
            same = i < len(self._pending) and normalize_word(self._pending[i].word) == normalize_word(new.word)
            if not same:
                break
            seen.append(self._seen[i] + 1 if i < len(self._seen) else 2)
        seen += [1] * (len(placed) - len(seen))
        agreed = 0
        for i, (new, n) in enumerate(zip(placed if can_commit else (), seen, strict=False)):
            # A word near the window's end may be cut there or still change: committing it
            # would put the trim point inside the word and leave a fragment for the next window.
            # A sure word the model has heard past (another word follows it) is less at risk.
            margin = cfg.commit_margin_s
            if new.probability >= cfg.sure_probability and i + 1 < len(placed):
                margin = min(margin, cfg.sure_margin_s)
            if n < 2 or new.end > window_end - margin:
                break
            # a word the model doubts needs one more hypothesis to say it
            if new.probability < cfg.commit_min_probability and n < 3:
                break
            agreed += 1
        events: list[Event] = []
        if agreed:
            events.append(self._commit(placed[:agreed], endpoint=False))
        self._pending, self._seen = placed[agreed:], seen[agreed:]
        events.extend(self._refresh_partial())
        return events

    def close(self, end: float, *, speech_goes_on: bool = False) -> list[Event]:
        """End the utterance at ``end``: the pending words become an endpoint ``Final``.

        The final is emitted when it has words or when the utterance already produced finals
        (then it may be empty and only marks the endpoint); a partial left on screen is cleared.
        ``speech_goes_on`` (a forced endpoint inside speech): the commit point stays after the
        last committed word, so a word cut by ``end`` is heard again by the next utterance,
        whose first words repeating the committed ones are dropped.
        """
        events: list[Event] = []
        if self._pending or self._finals_in_utterance:
            events.append(self._commit(self._pending, endpoint=True))
        elif self._shown:
            events.append(self._partial(()))
        self._pending, self._seen = [], []
        self._shown = ""
        self._finals_in_utterance = 0
        self._utterance_start = None
        if speech_goes_on:
            self._soft_boundary = bool(self._tail)
        else:
            self._committed_end = max(self._committed_end, end)
            self._soft_boundary = False  # the next window starts after a pause: nothing to dedupe
        return events

    def force_commit(self, before: float) -> list[Event]:
        """Commit, without agreement, the pending words that end by ``before`` (seconds).

        Used when the uncommitted audio nears the window limit.
        """
        n = 0
        while n < len(self._pending) and self._pending[n].end <= before:
            n += 1
        if not n:
            return []
        events: list[Event] = [self._commit(self._pending[:n], endpoint=False)]
        self._pending, self._seen = self._pending[n:], self._seen[n:]
        events.extend(self._refresh_partial())
        return events

    def skip_to(self, time: float) -> None:
        """Move the commit point to ``time`` without text (audio that will never be heard)."""
        if time <= self._committed_end:
            return
        self._committed_end = time
        self._soft_boundary = False
        self._pending = [w for w in self._pending if w.start >= time]
        self._seen = [1] * len(self._pending)

    def trim_point(self, keep_s: float = 0.0) -> float:
        """Where a long window may start: after the last committed word that leaves at least
        ``keep_s`` seconds of committed words after it (the forced prefix of the next windows),
        half-way to the next word; 0.0 when none is that old; the commit point itself when
        ``keep_s`` is 0."""
        if keep_s <= 0:
            return self._committed_end
        limit = self._committed_end - keep_s
        words = list(self._tail)
        for i in range(len(words) - 1, -1, -1):
            if words[i].end <= limit:
                # mid-way to the next word: a cut right at a word's end leaves its last
                # milliseconds (and the analysis window around them) in the next window
                after = words[i + 1].start if i + 1 < len(words) else words[i].end
                return max(words[i].end, (words[i].end + after) / 2)
        return 0.0

    def context(self, window_start: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(prompt, prefix) token ids for a window starting at ``window_start`` seconds.

        The prefix is the committed text inside the window (the decoder continues after it);
        the prompt is committed text before the window (at most ``max_prompt_tokens``).
        """
        cfg = self._config
        if self._encode is None:
            return (), ()
        inside = [w for w in self._tail if w.end > window_start]
        if not inside:
            # After a pause the prompt reads as a finished sentence: one that breaks off
            # ("... can do for you") makes the decoder continue it and skip new words that
            # sound like its end ("ask what you can do for your country" -> "for your country").
            return (self._prompt if self._soft_boundary else self._closed_prompt), ()
        before = list(self._tail)[: len(self._tail) - len(inside)]
        text = "".join(w.word for w in inside)
        if cfg.bare_prefix_end:
            # The mark after the last committed word was the decoder's guess at what follows,
            # made when the window ended there ("rose, Mike."): left in the prefix, it steers
            # the decoder to the same guess ("rose, might" -> ", Mike never die").
            text = text.rstrip(CLAUSE_END_PUNCTUATION)
        prefix = tuple(self._encode(text))
        prompt: tuple[int, ...] = ()
        if before and cfg.condition_on_committed and cfg.max_prompt_tokens:
            prompt = tuple(self._encode("".join(w.word for w in before[-cfg.max_prompt_tokens :])))
            prompt = prompt[-cfg.max_prompt_tokens :]
        return prompt, prefix

    def _vouched(self, words: Sequence[HypothesisWord], window_start: float, window_end: float, prefixed: bool) -> bool:
        """Whether these words and the uncommitted words of the latest hypothesis begin alike:
        one is the other, or goes on from it (a name doubted twice, then followed by more)."""
        placed = self._place([w for w in words if normalize_word(w.word)], window_start, window_end, prefixed)
        return bool(placed and self._pending) and all(
            normalize_word(a.word) == normalize_word(b.word) for a, b in zip(placed, self._pending)
        )

    def _place(
        self, words: Sequence[HypothesisWord], window_start: float, window_end: float, prefixed: bool = False
    ) -> list[Word]:
        """Absolute, monotonic, clamped words that are not yet committed."""
        out: list[Word] = []
        prev_end = self._committed_end
        for w in words:
            start, end = window_start + w.start, window_start + w.end
            if start >= window_end:  # decoded into the padding after the audio
                break
            if end <= self._committed_end and not prefixed:  # audio already committed
                continue
            start = min(max(start, prev_end), window_end)
            end = min(max(end, start), window_end)
            out.append(Word(w.word, round(start, 3), round(end, 3), w.probability))
            prev_end = end
        out = self._drop_copied_runs(out)
        # After a forced prefix the decoder starts right after the committed words, so words
        # repeating them are the decoder saying its last phrase again (two words at least: a
        # single repeated word may be a real "the the").
        return self._drop_repeated_tail(out, min_words=2 if prefixed else 1)

    def _drop_copied_runs(self, words: list[Word]) -> list[Word]:
        """Drop runs of ``copy_min_words`` or more words that repeat recently committed text.

        Whisper conditioned on a prompt sometimes copies it when the window holds little new
        audio; real speech seldom repeats that many words of the last sentences verbatim.
        """
        n = self._config.copy_min_words
        if not n or len(words) < n or len(self._tail) < n:
            return words
        recent = [normalize_word(w.word) for w in list(self._tail)[-self._config.copy_lookback_words :]]
        grams = {tuple(recent[i : i + n]) for i in range(len(recent) - n + 1)}
        keys = [normalize_word(w.word) for w in words]
        drop = [False] * len(words)
        for i in range(len(words) - n + 1):
            if tuple(keys[i : i + n]) in grams:
                drop[i : i + n] = [True] * n
        if any(drop):
            logger.debug("dropped %d word(s) copying committed text", sum(drop))
        return [w for w, d in zip(words, drop) if not d]

    def _drop_repeated_tail(self, words: list[Word], min_words: int = 1) -> list[Word]:
        """Drop leading words that repeat the committed tail right at a soft commit point."""
        cfg = self._config
        if not (self._soft_boundary and words and self._tail):
            return words
        if words[0].start > self._committed_end + cfg.dedupe_window_s:
            return words
        tail = [normalize_word(w.word) for w in list(self._tail)[-cfg.dedupe_max_ngram :]]
        head = [normalize_word(w.word) for w in words[: cfg.dedupe_max_ngram]]
        for n in range(min(len(tail), len(head)), min_words - 1, -1):
            if tail[-n:] == head[:n]:
                logger.debug("dropped %d word(s) repeating the committed tail", n)
                return words[n:]
        return words

    def _commit(self, words: Sequence[Word], *, endpoint: bool) -> Final:
        words = tuple(words)
        if words:
            start, end = words[0].start, words[-1].end
            self._committed_end = max(self._committed_end, end)
            self._tail.extend(words)
            self._soft_boundary = True
            self._update_prompt()
        else:
            start = end = self._committed_end
        self._finals_in_utterance += 1
        self._shown = ""  # a final clears the partial on the client
        final = Final(_text(words), start, end, words, self._seq, endpoint)
        self._seq += 1
        return final

    def _refresh_partial(self) -> list[Event]:
        text = _text(self._pending)
        if text == self._shown:
            return []
        self._shown = text
        return [self._partial(tuple(self._pending))]

    def _partial(self, words: tuple[Word, ...]) -> Partial:
        if words:
            start, end = words[0].start, words[-1].end
        else:
            start = end = self._committed_end
        partial = Partial(_text(words), start, end, words, self._seq)
        self._seq += 1
        return partial

    def _update_prompt(self) -> None:
        cfg = self._config
        if self._encode is None or not cfg.condition_on_committed or not cfg.max_prompt_tokens:
            return
        words = list(self._tail)[-cfg.max_prompt_tokens :]
        text = "".join(w.word for w in words)
        self._prompt = tuple(self._encode(text))[-cfg.max_prompt_tokens :]
        self._closed_prompt = self._prompt
        if cfg.close_prompt_at_pause and text.rstrip()[-1:].isalnum():
            self._closed_prompt = tuple(self._encode(text.rstrip() + "."))[-cfg.max_prompt_tokens :]
