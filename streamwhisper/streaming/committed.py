"""A stream's committed words: the text its next windows are decoded with, and where its audio may be trimmed.

:class:`CommittedTail` keeps the last committed words (:data:`TAIL_WORDS`, or more when the
prompt, the copy guard or boundary de-duplication needs more) and the prompt made of them.
Pure: :class:`~streamwhisper.streaming.agreement.CommitPolicy` owns one and decides what is
committed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from streamwhisper.events import Word

from .config import PolicyConfig

TAIL_WORDS = 256  # committed words kept: more than a 30 s window can hold
# Marks that end a clause or sentence (Latin and CJK): left off the end of a forced prefix.
CLAUSE_END_PUNCTUATION = ".,;:!?…。，、；：！？"


class CommittedTail:
    """The last committed words and the prompt they make.

    ``prompt`` is the last ``max_prompt_tokens`` committed words (each word is a token or more,
    so they cover the recogniser's token budget); ``closed_prompt`` the same read as a finished
    sentence (``close_prompt_at_pause``), for a window after a pause.
    """

    def __init__(self, config: PolicyConfig) -> None:
        self._config = cfg = config
        size = max(TAIL_WORDS, cfg.max_prompt_tokens, cfg.copy_lookback_words, cfg.dedupe_max_ngram)
        self.words: deque[Word] = deque(maxlen=size)
        self.prompt = self.closed_prompt = ""

    @property
    def last_end(self) -> float | None:
        """End of the last committed word (seconds), None before the first."""
        return self.words[-1].end if self.words else None

    def extend(self, words: Sequence[Word]) -> None:
        """Commit ``words`` (after every word committed before) and make the prompt anew."""
        self.words.extend(words)
        cfg = self._config
        if not words or not cfg.condition_on_committed or not cfg.max_prompt_tokens:
            return
        text = "".join(w.word for w in list(self.words)[-cfg.max_prompt_tokens :])
        self.prompt = self.closed_prompt = text
        if cfg.close_prompt_at_pause and text.rstrip()[-1:].isalnum():
            self.closed_prompt = text.rstrip() + "."

    def holds(self, window_start: float) -> bool:
        """Whether a window starting at ``window_start`` seconds holds committed words."""
        last = self.last_end
        return last is not None and last > window_start

    def context(self, window_start: float) -> tuple[str, str]:
        """(prompt, prefix) for a window starting at ``window_start`` seconds: the prefix is the
        text of the committed words it holds, the prompt the last ``max_prompt_tokens``
        committed words before it."""
        cfg = self._config
        inside = [w for w in self.words if w.end > window_start]
        before = list(self.words)[: len(self.words) - len(inside)]
        prompt = ""
        if before and cfg.condition_on_committed and cfg.max_prompt_tokens:
            prompt = "".join(w.word for w in before[-cfg.max_prompt_tokens :])
        prefix = "".join(w.word for w in inside)
        if cfg.bare_prefix_end:
            # The mark after the last committed word was the decoder's guess at what follows,
            # made when the window ended there ("rose, Mike."): left in the prefix, it steers
            # the decoder to the same guess ("rose, might" -> ", Mike never die").
            prefix = prefix.rstrip(CLAUSE_END_PUNCTUATION)
        return prompt, prefix

    def trim_point(self, limit: float) -> float:
        """After the last committed word that ends by ``limit`` (seconds), half-way to the next
        word; 0.0 when none ends that early."""
        words = list(self.words)
        for i in range(len(words) - 1, -1, -1):
            if words[i].end <= limit:
                # mid-way to the next word: a cut right at a word's end leaves its last
                # milliseconds (and the analysis window around them) in the next window
                after = words[i + 1].start if i + 1 < len(words) else words[i].end
                return max(words[i].end, (words[i].end + after) / 2)
        return 0.0
