"""LocalAgreement-2: from screened hypotheses to ``Partial`` and append-only ``Final`` events.

:class:`CommitPolicy` takes each hypothesis of a stream (screened first, see
:mod:`.screening`), places its words on the audio clock and commits the words that two
consecutive hypotheses agree on; an endpoint commits the rest of the utterance and
:meth:`CommitPolicy.force_commit` commits without agreement when the window grows too long. It
also says where the caller may trim its audio (:meth:`CommitPolicy.trim_point`) and what text the
next window is decoded with (:meth:`CommitPolicy.context`).

Pure and clock-free: the caller says which window (on the audio clock, in seconds) each
hypothesis describes. Invariants the policy keeps:

- finals are append-only: every committed word ends after the previous one (the *commit point*
  ``committed_end`` only moves forward) and is never emitted twice;
- a word is committed when two consecutive hypotheses agree on it (normalised text, as a
  common prefix of their uncommitted words), or one says it sure of it with a word after it
  (``sure_hypotheses``), and it ends clear of the window's end; as the latest hypothesis says it
  when the one before heard it too and it ends ``stall_commit_s`` before the window's end; at an
  endpoint; or by :meth:`CommitPolicy.force_commit`; but not as a hypothesis' last word with a
  full stop the decoder doubts (``pause_stop_min_probability``: a window ending at a breath);
- a window still holding committed words inside continuous speech is decoded with them as a
  forced prefix (:meth:`CommitPolicy.context`): nothing is duplicated or lost at the commit
  point, no word is cut in two; a window reopened over an utterance closed at a pause hears its
  words again, and those ending by the commit point are dropped; an utterance whose words were
  all dropped as doubted (or copied, :meth:`CommitPolicy.restart`) leaves its audio to the next;
- when the caller trims its audio at ``committed_end`` (a long utterance), the next window
  starts where the last committed word ends; words of that window ending at or before the
  commit point, or repeating the committed tail right at the boundary, are dropped.

The committed words themselves, and the prompt made of them, are kept by :class:`.CommittedTail`.
The prompt and prefix are text: the recogniser encodes them (on its own thread) and keeps the
last ``max_prompt_tokens`` tokens of the prompt.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from streamwhisper.events import Event, Final, Partial, Word
from streamwhisper.model.recognizer import Hypothesis, HypothesisWord

from .committed import CommittedTail
from .config import PolicyConfig
from .screening import drop_prompt_copy, normalize_word, place_words, screen, without_unsure_stop

logger = logging.getLogger(__name__)

CUT_MARGIN_S = 0.04  # two of Whisper's 20 ms timestamp steps
# A window holds whole mel frames, one short of its audio (2 s of audio is a 1.99 s window):
# the 2 s window meets min_commit_window_s = 2 (without the slack the first commit waited for
# the next step: read_en final latency p95 2.3 s instead of 1.8 s at a 0.5 s step).
WINDOW_SLACK_S = 0.05
UNHEARD = ("low_word_probability", "prompt_copy")  # screened out: the audio is left for the next window


def _text(words: Sequence[Word]) -> str:
    return "".join(w.word for w in words).strip()


def _said(hypothesis: Hypothesis) -> str:
    """The hypothesis's words with their probabilities, for the debug log."""
    return " ".join(f"{w.word.strip()}:{w.probability:.2f}" for w in hypothesis.words)


class CommitPolicy:
    """Turns a stream of hypotheses into partials and append-only finals.

    Args:
        config: guard thresholds, boundary de-duplication and prompt settings.
    """

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self._config = config or PolicyConfig()
        self._committed_end = 0.0
        # The committed tail feeds the prompt, the forced prefix (committed words in the window), the copy
        # guard and boundary de-duplication.
        self._committed = CommittedTail(self._config)
        self._soft_boundary = False  # the commit point lies inside continuous speech
        self._pending: list[Word] = []  # uncommitted words of the latest hypothesis
        self._seen: list[int] = []  # for each pending word, how many hypotheses in a row said it
        self._finals_in_utterance, self._unended = 0, False  # the utterance's finals; one since its last endpoint
        self._seq, self._shown = 0, ""  # the next event's seq; the text of the partial the client shows
        self._utterance_start: float | None = None  # window start of the utterance's first hypothesis
        self._unheard = False  # a reopened window of this utterance heard nothing new
        self._doubted: tuple[float, float] | None = None  # an utterance's words dropped as doubted
        self._unsaid = False  # the last utterance closed without an endpoint hypothesis (see close)
        self._restart: float | None = None  # where the utterance's windows gave way
        self._marks: dict[Word, float] = {}  # the latest placed words' closing marks' probabilities
        self.heard = False  # the latest hypothesis had words of its own (pending ones may be older)
        self.answer_owed = False  # a client's finalize ended the utterance: its close always has a final

    @property
    def committed_end(self) -> float:
        """The commit point: end of the last committed word or of skipped audio (seconds)."""
        return self._committed_end

    @property
    def last_word_end(self) -> float | None:
        """End of the last committed word (seconds), None before the first."""
        return self._committed.last_end

    @property
    def prompt(self) -> str:
        """The last committed text: its last ``max_prompt_tokens`` words, of which the
        recogniser keeps the last ``max_prompt_tokens`` tokens."""
        return self._committed.prompt

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
        prefix: str = "",
        speech_goes_on: bool = False,
    ) -> list[Event]:
        """Take the hypothesis of the window ``[window_start, window_end)``.

        ``prefix``: the committed words the window holds, decoded as a forced prefix ('' when
        none): the hypothesis holds only new words and needs no boundary de-duplication.

        Without ``endpoint``, words agreed with the previous hypothesis become a ``Final`` and
        the rest a ``Partial``. With ``endpoint`` the utterance ends: every remaining word of
        this hypothesis becomes final (or, when it places none, the pending words of the one
        before it) and the commit point moves to ``window_end``.
        """
        placed, reason = self._screened(hypothesis, window_start, window_end, prefix, endpoint=endpoint)
        self.heard = bool(placed)
        logger.debug(
            "hypothesis at %.2f-%.2f s%s%s: %r%s", window_start, window_end, " (prefixed)" if prefix else "",
            " (endpoint)" if endpoint else "", _said(hypothesis),
            f" (screened: {reason})" if reason else "",
        )
        doubted = (window_start, window_end) if endpoint and reason in UNHEARD else None
        if ended_early := not placed and self._rehears(window_start):
            # Heard again, the committed words can end the decoding ("... of about 1455."
            # <|endoftext|>, with the next sentence in the window): take them as the prefix for
            # the rest of the utterance. That hypothesis is no vote against the pending words.
            self._unheard = True
        if endpoint:
            if not placed and self._pending and (reason in UNHEARD or not reason):
                # No vote against the words the hypothesis before it said (its decoder doubted the window or
                # ended at the committed words): they end the utterance, as when its request is lost.
                logger.debug("the endpoint's hypothesis placed no word: %r end the utterance", _text(self._pending))
                placed, doubted = list(self._pending), None
            if speech_goes_on:
                # A word reaching a forced endpoint is cut in two there ("what" heard as "why"):
                # the next utterance, which starts before the endpoint, hears it whole.
                while placed and placed[-1].end >= window_end - CUT_MARGIN_S:
                    placed.pop()
            self._pending, self._seen = placed, [1] * len(placed)
            return self.close(window_end, speech_goes_on=speech_goes_on, doubted=doubted)
        if ended_early and not reason:
            return self._refresh_partial()
        cfg = self._config
        # Hypotheses of the first seconds of an utterance are guesses (Whisper needs context):
        # no commits until it is min_commit_window_s long (a trimmed window keeps its prompt).
        if self._utterance_start is None:
            self._utterance_start = window_start
        can_commit = window_end - self._utterance_start + WINDOW_SLACK_S >= cfg.min_commit_window_s
        seen: list[int] = []  # how many hypotheses in a row said each word (the same words before it)
        for i, new in enumerate(placed):
            if i >= len(self._pending) or normalize_word(self._pending[i].word) != normalize_word(new.word):
                break
            seen.append(self._seen[i] + 1 if i < len(self._seen) else 2)
        seen += [1] * (len(placed) - len(seen))
        agreed = 0
        # Hypotheses that keep disagreeing (noise, radio) would hold a word and all after it to the
        # endpoint: one the last hypothesis heard too is taken as is once stall_commit_s from the end.
        last = self._pending[-1].end if cfg.stall_commit_s and self._pending else -math.inf
        stall = min(last, window_end - cfg.stall_commit_s)
        for i, (new, n) in enumerate(zip(placed if can_commit else (), seen, strict=False)):
            if new is placed[-1] and without_unsure_stop([new], self._marks, cfg.pause_stop_min_probability) != [new]:
                break  # a window that ends at a breath ends with a full stop: wait for what follows
            # A word near the window's end may be cut there or still change (a commit would trim inside it,
            # leaving a fragment); a sure word heard past (a word follows it) is less at risk: see config.
            margin, needed = cfg.commit_margin_s, 2
            if new.probability >= cfg.sure_probability and i + 1 < len(placed):
                margin, needed = min(margin, cfg.sure_margin_s), cfg.sure_hypotheses
            unsure = new.probability < cfg.commit_min_probability and n < 3  # needs a third hypothesis
            if new.end > stall and (n < needed or new.end > window_end - margin or unsure):
                break
            agreed += 1
        events: list[Event] = []
        if agreed:
            events.append(self._commit(placed[:agreed], endpoint=False))
        self._pending, self._seen = placed[agreed:], seen[agreed:]
        events.extend(self._refresh_partial())
        return events

    def ends_at_committed(self, hypothesis: Hypothesis, start: float, end: float, *, prefix: str) -> bool:
        """Whether the decoder ended its text at the committed words: the screen kept all, none is new."""
        placed, reason = self._screened(hypothesis, start, end, prefix)
        return not placed and not reason

    def close(
        self, end: float, *, speech_goes_on: bool = False, doubted: tuple[float, float] | None = None,
        unsaid: bool = False,
    ) -> list[Event]:
        """End the utterance at ``end``: the pending words become an endpoint ``Final``.

        The final is emitted when it has words, the utterance had finals, or a client's finalize ended
        it (``answer_owed``): it may be empty, only marking the endpoint; a partial on screen is cleared.
        ``speech_goes_on`` (a forced endpoint inside speech): the commit point stays after the
        last committed word, so a word cut by ``end`` is heard again by the next utterance,
        whose first words repeating the committed ones are dropped.
        ``doubted``: the window of the utterance's last hypothesis, whose words were dropped as doubted
        (or copied): the commit point stays before them, for a window reopened over them (:meth:`reopen_point`).
        ``unsaid``: no hypothesis heard the audio to ``end`` (its decoder may have stopped before the last
        words): a window reopened over the utterance keeps the words it says after the committed ones.
        """
        events: list[Event] = []
        self._doubted = None if speech_goes_on else doubted
        if self._pending or self._finals_in_utterance or self.answer_owed:
            events.append(self._commit(self._pending, endpoint=True))
        elif self._shown:
            events.append(self._partial(()))
        self._pending, self._seen, self._shown, self._finals_in_utterance, self.answer_owed = [], [], "", 0, False
        self._unsaid = unsaid and not speech_goes_on
        self._utterance_start, self._unheard, self._restart = None, False, None
        if speech_goes_on:
            self._soft_boundary = bool(self._committed.words)
        else:
            if doubted is None:  # (else the commit point stays before the doubted words)
                self._committed_end = max(self._committed_end, end)
            self._soft_boundary = False  # the next window starts after a pause: nothing to dedupe
        return events

    def tail_prompt(self) -> str:
        """The prompt of a window after the pending words (:meth:`close_with_tail`): every word before it."""
        words = "".join(w.word for w in self._pending)  # (each with its leading space)
        return (self._committed.prompt + words).strip() if self._config.condition_on_committed else ""

    def close_with_tail(
        self, hypothesis: Hypothesis, start: float, end: float, *, speech_goes_on: bool = False
    ) -> list[Event]:
        """End the utterance at ``end`` with the words of ``hypothesis``, a window ``[start, end)``
        of only the audio after the pending words, appended to them (see ``tail_unheard_s``)."""
        placed, reason = self._screened(hypothesis, start, end, "", endpoint=True)
        said_to = self._pending[-1].end if self._pending else self._committed_end
        new = [w for w in placed if w.end > said_to + CUT_MARGIN_S]
        if new and self._pending and normalize_word(new[0].word) == normalize_word(self._pending[-1].word):
            new = new[1:]  # the window's start heard the last pending word again
        screened = f" (screened: {reason})" if reason else ""
        logger.debug("tail at %.2f-%.2f s: %r%s", start, end, _said(hypothesis), screened)
        self._pending, self.heard = self._pending + new, bool(new)
        return self.close(end, speech_goes_on=speech_goes_on, unsaid=not new)

    def commit_pending(self, *, eager: bool = True) -> list[Event] | None:
        """Commit the pending words of the latest hypothesis now as an endpoint ``Final`` (a client's
        short endpointing), keeping the utterance open: empty when agreement committed them all
        first (or it had none), nothing when no final since the last endpoint. A last full stop the
        decoder doubts is dropped, or, not ``eager``, commits nothing (None): the endpoint keeps it."""
        pending = self._pending if self.heard else []  # (not those of a hypothesis before it)
        words = without_unsure_stop(pending, self._marks, self._config.pause_stop_min_probability)
        if not eager and words != pending:
            return None
        events: list[Event] = [self._commit(words, endpoint=True)] if words or self._unended else []
        self._pending, self._seen = [], []
        return events

    def restart(self, time: float) -> None:
        """The utterance's windows start at ``time`` (seconds) now: see :func:`.drop_prompt_copy`."""
        self._restart = time

    def force_commit(self, before: float) -> list[Event]:
        """Commit, without agreement, the pending words that end by ``before`` (seconds): the
        uncommitted audio nears the window limit."""
        n = next((i for i, w in enumerate(self._pending) if w.end > before), len(self._pending))
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
        return self._committed.trim_point(self._committed_end - keep_s) if keep_s > 0 else self._committed_end

    def reopen_point(self, start: float, gap_s: float, keep_s: float) -> float:
        """Where a new utterance starting at ``start`` may open its window: back over the
        committed words of the last ``keep_s`` seconds (:meth:`trim_point`, at most ``keep_s +
        gap_s`` before the last word's end) when the last of them ended within ``gap_s`` of
        ``start``; also back to the words of the last utterance, dropped as doubted (see :meth:`close`),
        when it ended within ``gap_s`` of ``start``; ``start`` itself otherwise (or when ``gap_s`` is 0)."""
        last, point = self.last_word_end, start
        if gap_s and last is not None and start <= last + gap_s:
            point = min(start, max(self.trim_point(keep_s), last - keep_s - gap_s))
        if gap_s and self._doubted is not None and start <= self._doubted[1] + gap_s:
            point = min(point, max(self._doubted[0], start - keep_s - gap_s))
        return point

    def context(self, window_start: float) -> tuple[str, str]:
        """(prompt, prefix) text for a window starting at ``window_start`` seconds.

        The prefix is the committed text inside the window (the decoder continues after it);
        the prompt is committed text before the window (its last ``max_prompt_tokens`` words).
        """
        if not self._committed.holds(window_start):
            # After a pause the prompt reads as a finished sentence: one that breaks off
            # ("... can do for you") makes the decoder continue it and skip new words that
            # sound like its end ("ask what you can do for your country" -> "for your country").
            return (self._committed.prompt if self._soft_boundary else self._committed.closed_prompt), ""
        if self._rehears(window_start):
            # A window reopened over an utterance that closed at a pause hears its words again,
            # without a prompt, and _place drops them by time: as a forced prefix (or after the
            # prompt that breaks off before them), "... for you" or "And so." made the decoder
            # take the new "ask what you" or "my fellow Americans" for its end and skip them.
            return "", ""
        return self._committed.context(window_start)

    def _rehears(self, window_start: float) -> bool:
        """Whether a window starting at ``window_start`` is decoded without the committed words
        it holds: reopened over an utterance that closed at a pause (none committed since)."""
        closed = not (self._soft_boundary or self._unheard or self._config.reopened_prefix)
        return closed and self._committed.holds(window_start)

    def _vouched(self, words: Sequence[HypothesisWord], window_start: float, window_end: float, prefixed: bool) -> bool:
        """Whether these words and the uncommitted words of the latest hypothesis begin alike:
        one is the other, or goes on from it (a name doubted twice, then followed by more)."""
        placed = self._place([w for w in words if normalize_word(w.word)], window_start, window_end, prefixed)
        return bool(placed and self._pending) and all(
            normalize_word(a.word) == normalize_word(b.word) for a, b in zip(placed, self._pending, strict=False)
        )

    def _screened(
        self, hypothesis: Hypothesis, window_start: float, window_end: float, prefix: str, endpoint: bool = False
    ) -> tuple[list[Word], str]:
        """(the placed words of the screened hypothesis, why words were dropped: '' if none were)."""
        vouched = lambda ws: self._vouched(ws, window_start, window_end, bool(prefix))  # noqa: E731
        alone = endpoint and not (self._pending or self._finals_in_utterance)  # (its only words)
        words, reason = screen(hypothesis, self._config, vouched, prefix, alone)
        placed = self._place(words, window_start, window_end, bool(prefix))
        if not prefix and self._restart is not None and math.isclose(window_start, self._restart, abs_tol=1e-6):
            placed, copied = drop_prompt_copy(placed, self._committed.words, self._config)
            reason = reason or copied
        return placed, reason

    def _place(
        self, words: Sequence[HypothesisWord], window_start: float, window_end: float, prefixed: bool = False
    ) -> list[Word]:
        """Absolute, monotonic, clamped words that are not yet committed (see :func:`.place_words`)."""
        placed, self._marks = place_words(
            words, window_start, window_end, prefixed, tail=self._committed.words, committed_end=self._committed_end,
            soft_boundary=self._soft_boundary, unsaid=self._unsaid and self._rehears(window_start), config=self._config,
        )
        return placed

    def _commit(self, words: Sequence[Word], *, endpoint: bool) -> Final:
        words = tuple(words)
        if words:
            start, end = words[0].start, words[-1].end
            self._committed_end = max(self._committed_end, end)
            self._committed.extend(words)
            self._soft_boundary = True
        else:
            start = end = self._committed_end
        self._finals_in_utterance, self._unended = self._finals_in_utterance + 1, not endpoint
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
        start, end = (words[0].start, words[-1].end) if words else (self._committed_end,) * 2
        partial = Partial(_text(words), start, end, words, self._seq)
        self._seq += 1
        return partial
