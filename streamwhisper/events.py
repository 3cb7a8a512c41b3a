"""What a stream tells its client: frozen dataclasses, turned into JSON only by ``runtime/dialects/``.

Times are seconds on the audio clock (samples fed / 16,000), never wall-clock.

Ordering contract, per stream:

- ``SpeechStarted`` / ``SpeechEnded`` alternate, starting with ``SpeechStarted``.
- ``Partial`` and ``Final`` share one ``seq`` counter that starts at 0 and grows by exactly 1
  per emitted ``Partial`` or ``Final``, so a client can order them and notice a gap.
- A ``Final`` is never revised or repeated; its words follow the previous ``Final``'s words in
  time. Concatenating the ``words`` of all finals gives the transcript.
- A ``Partial`` is the not-yet-final text after the last ``Final``; it replaces the previous
  ``Partial``. A ``Final`` clears the shown partial; an empty ``Partial`` clears it too.
- ``Final(endpoint=True)`` closes an utterance (VAD endpoint or end of stream). Every utterance
  that produced text ends with exactly one; its text may be empty when agreement had already
  committed every word. Utterances without text produce no ``Final`` at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class Word:
    """A recognised word; ``word`` keeps Whisper's leading space (absent in e.g. Chinese)."""

    word: str
    start: float
    end: float
    probability: float


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    """Voice activity began; ``time`` is the start of the first voiced VAD frame."""

    time: float


@dataclass(frozen=True, slots=True)
class SpeechEnded:
    """Voice activity ended; ``time`` is the end of the last voiced VAD frame.

    It is emitted once the endpoint silence has passed (or at the end of the stream).
    """

    time: float


@dataclass(frozen=True, slots=True)
class Partial:
    """Revisable text after the last ``Final``; ``text`` is the words joined and stripped."""

    text: str
    start: float
    end: float
    words: tuple[Word, ...]
    seq: int


@dataclass(frozen=True, slots=True)
class Final:
    """Append-only text; ``endpoint`` is True when it closes an utterance."""

    text: str
    start: float
    end: float
    words: tuple[Word, ...]
    seq: int
    endpoint: bool = False


@dataclass(frozen=True, slots=True)
class Error:
    """A failure reported to the client; ``code`` is a short machine-readable name."""

    code: str
    message: str


Event: TypeAlias = SpeechStarted | SpeechEnded | Partial | Final | Error

__all__ = ["Error", "Event", "Final", "Partial", "SpeechEnded", "SpeechStarted", "Word"]
