"""The one-method seam between the streaming core and the model.

A streaming session describes the work it needs as a :class:`RecognitionRequest` (a window of
normalised log-mel, and the committed text as prompt and forced prefix); a runtime gathers
requests, calls :meth:`Recognizer.recognize` on a batch and hands each :class:`Hypothesis` back.
The streaming core never sees the model, so its tests use a scripted fake recogniser.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class HypothesisWord:
    """A word of a hypothesis; times in seconds from the start of the request's window."""

    word: str  # with its leading space, as Whisper's tokenizer produces it
    start: float
    end: float
    probability: float
    mark_probability: float = 1.0  # of its closing punctuation mark (1.0: it has none)


@dataclass(frozen=True)
class RecognitionRequest:
    """One window of audio to recognise.

    ``mel`` is the normalised log-mel of the window, shape (n_mels, n_frames) with
    n_frames <= 3000 (the recogniser pads it). The prompt (previously committed text, sent after
    ``<|startofprev|>``) is the token ids ``prompt`` followed by the tokens of ``prompt_text``,
    of which the last ``max_prompt_tokens`` are kept (None: all); the forced prefix is
    ``prefix`` followed by the tokens of ``prefix_text``. The streaming core gives text, which
    the recogniser encodes on its own thread (:meth:`with_tokens`).
    ``start``/``end`` place the window on its stream's audio clock (seconds), ``endpoint``
    says that it finalises an utterance and ``urgent`` that it is the endpoint or may serve as
    it (the hypothesis at a pause): what a scheduler needs (the recogniser reads ``endpoint``
    only for ``RecognizerConfig.endpoint_min_ctx_s``); so is ``bulk``: a window of a
    whole-file transcription, served after every live request.
    ``crowded`` says that the live request gets a share of the cores (they were saturated when
    it was taken, or it is a turn's request that started beside another batch): the recogniser
    serves it as one of a batch of two at least (with the default settings: at a fitted audio
    context of 10 s or more, greedily), because a window alone (20 s or more, beam search)
    costs two or three.
    ``timestamps`` decodes with timestamp tokens (kept in the hypothesis' tokens: offline
    segmentation) and Whisper's full token budget; ``temperatures`` replaces the recogniser's
    fallback temperatures for this request.
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
    urgent: bool = False
    prompt_text: str = ""
    prefix_text: str = ""
    max_prompt_tokens: int | None = None
    timestamps: bool = False
    bulk: bool = False
    crowded: bool = False
    temperatures: tuple[float, ...] | None = None

    def with_tokens(self, encode: Callable[[str], Sequence[int]]) -> RecognitionRequest:
        """This request with its prompt and prefix as token ids alone, ``encode`` turning text
        into tokens."""
        prompt = self.prompt + tuple(encode(self.prompt_text)) if self.prompt_text else self.prompt
        if self.max_prompt_tokens is not None:
            prompt = prompt[len(prompt) - min(len(prompt), self.max_prompt_tokens) :]
        prefix = self.prefix + tuple(encode(self.prefix_text)) if self.prefix_text else self.prefix
        return replace(self, prompt=prompt, prefix=prefix, prompt_text="", prefix_text="", max_prompt_tokens=None)


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
    # the recogniser's fallback rule on the result it kept: silence, or a loop even at the last
    # temperature (the streaming policy drops both rather than judging them again)
    silent: bool = False
    looping: bool = False
    extra: dict[str, float] = field(default_factory=dict)


class Recognizer(Protocol):
    """Anything that turns a batch of requests into one hypothesis each, in order."""

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]: ...
