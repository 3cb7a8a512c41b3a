"""The one-method seam between the streaming core and the model.

A streaming session describes the work it needs as a :class:`RecognitionRequest` (a window of
normalised log-mel and the committed-text prompt); a runtime gathers requests, calls
:meth:`Recognizer.recognize` on a batch and hands each :class:`Hypothesis` back. The streaming
core never sees the model, so its tests use a scripted fake recogniser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class HypothesisWord:
    """A word of a hypothesis; times in seconds from the start of the request's window."""

    word: str  # with its leading space, as Whisper's tokenizer produces it
    start: float
    end: float
    probability: float


@dataclass(frozen=True)
class RecognitionRequest:
    """One window of audio to recognise.

    ``mel`` is the normalised log-mel of the window, shape (n_mels, n_frames) with
    n_frames <= 3000 (the recogniser pads it); ``prompt`` holds the token ids of previously
    committed text (sent after ``<|startofprev|>``); ``prefix`` optional forced text tokens.
    ``start``/``end`` place the window on its stream's audio clock (seconds) and ``endpoint``
    says that it finalises an utterance: what a scheduler needs, ignored by the recogniser.
    """

    mel: np.ndarray
    prompt: tuple[int, ...] = ()
    language: str | None = None
    task: str = "transcribe"
    word_timestamps: bool = True
    key: object = None  # opaque to the recogniser: who asked (a session id, say)
    prefix: tuple[int, ...] = ()
    start: float = 0.0
    end: float = 0.0
    endpoint: bool = False


@dataclass(frozen=True)
class Hypothesis:
    """What the model heard in one window."""

    text: str
    tokens: tuple[int, ...]
    words: tuple[HypothesisWord, ...]
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    language: str
    temperature: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class Recognizer(Protocol):
    """Anything that turns a batch of requests into one hypothesis each, in order."""

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]: ...

    def encode_text(self, text: str) -> list[int]: ...

