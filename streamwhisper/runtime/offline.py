"""Whole-file transcription on the daemon's inference worker (the OpenAI-compatible uploads).

The seek loop is :class:`~streamwhisper.window_loop.WindowLoop`, the same one
``streamwhisper transcribe`` runs; only where a window is computed differs. Here each window is
a :class:`RecognitionRequest` marked ``bulk`` and decoded with timestamp tokens, submitted to the
one :class:`~streamwhisper.runtime.worker.InferenceWorker` that serves the live streams, which
runs bulk windows after every live request and one at a time. An upload has one window at the
worker at a time, so its transcript arrives window by window (what ``stream=true`` sends).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamwhisper.audio.mel import log_mel
from streamwhisper.errors import ConfigError, StreamWhisperError
from streamwhisper.model.decoding import DecodeOptions
from streamwhisper.model.fallback import WHISPER_TEMPERATURES, FallbackRule
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest
from streamwhisper.model.tokenizer import Tokenizer, get_tokenizer
from streamwhisper.transcribe import TranscribeOptions
from streamwhisper.whisper_input import N_SAMPLES
from streamwhisper.window_loop import (
    MAX_PROMPT_TOKENS,
    Segment,
    Window,
    WindowLoop,
    WordSource,
    median_word_s,
    words_by_text,
)

from .pump import SchedulerFull
from .worker import InferenceWorker


class Unavailable(StreamWhisperError):
    """The worker would not take or finish a window (full, stopping, or the batch failed)."""


@dataclass(frozen=True)
class FileRequest:
    """What a client asked of one file."""

    language: str | None = None
    task: str = "transcribe"
    prompt: str | None = None
    temperature: float = 0.0  # 0: Whisper's fallback from 0 to 1; otherwise that temperature alone
    word_timestamps: bool = False


@dataclass(frozen=True)
class ModelInfo:
    """What the daemon knows of its model without touching it (read on the event loop)."""

    n_mels: int = 80
    multilingual: bool = False
    num_languages: int = 99

    @classmethod
    def of(cls, recognizer: Any) -> ModelInfo:
        model = getattr(recognizer, "model", None)
        dims = getattr(model, "dims", None)
        return cls(
            n_mels=int(getattr(dims, "n_mels", 80)),
            multilingual=bool(getattr(model, "is_multilingual", False)),
            num_languages=int(getattr(model, "num_languages", 99)),
        )

    def tokenizer(self, language: str | None, task: str) -> Tokenizer:
        """The tokenizer of a language and task; ConfigError for an unknown language."""
        try:
            return get_tokenizer(
                self.multilingual,
                num_languages=self.num_languages,
                language=language if self.multilingual else "en",
                task=task,  # type: ignore[arg-type]
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


class FileTranscription:
    """One file's transcription, window by window, on the shared worker.

    Args:
        worker: the daemon's inference worker.
        model: the served model's facts.
        audio: the 16 kHz mono file.
        request: the client's options.
        key: who asks (logged by the worker, never read by the recogniser).
    """

    def __init__(
        self, worker: InferenceWorker, model: ModelInfo, audio: np.ndarray, request: FileRequest, key: object
    ) -> None:
        self.worker, self.model, self.audio, self.request, self.key = worker, model, audio, request, key
        self.tokenizer = model.tokenizer(request.language, request.task)  # checks the language
        self.language = request.language if model.multilingual else "en"
        temperatures = WHISPER_TEMPERATURES if request.temperature == 0 else (request.temperature,)
        self.options = TranscribeOptions(
            decode=DecodeOptions(task=request.task, language=self.language),
            fallback=FallbackRule(temperatures=temperatures),
            initial_prompt=request.prompt or None,
            word_timestamps=request.word_timestamps,
        )
        self.duration = len(audio) / 16000
        self.segments: list[Segment] = []

    async def run(self) -> AsyncGenerator[list[Segment], None]:
        """The segments each decoded window adds, in order (an empty list for a silent one)."""
        mel = await asyncio.to_thread(log_mel, self.audio, self.model.n_mels, padding=N_SAMPLES)
        loop = WindowLoop(self.audio, mel, self.tokenizer, self.options)
        self.duration = loop.duration
        while (window := loop.next_window()) is not None:
            hypothesis = await self._recognize(window)
            if self.language is None:  # a multilingual model detected it on the first window
                self.language = hypothesis.language
            words = _words(hypothesis, window) if self.options.word_timestamps else None
            added = loop.complete(window, hypothesis, words)
            self.segments.extend(added)
            yield added

    async def _recognize(self, window: Window) -> Hypothesis:
        request = RecognitionRequest(
            mel=window.mel,
            prompt=window.prompt,
            language=self.language,
            task=self.request.task,
            word_timestamps=self.options.word_timestamps,
            key=self.key,
            start=window.offset,
            end=window.offset + window.seconds,
            max_prompt_tokens=MAX_PROMPT_TOKENS,
            timestamps=True,
            bulk=True,
            temperatures=self.options.fallback.temperatures,
        )
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(outcome: Any) -> None:
            if not future.done():
                future.set_result(outcome)

        try:
            job = self.worker.submit(request, done)
        except SchedulerFull as exc:
            raise Unavailable(str(exc)) from None
        try:
            outcome = await future
        except asyncio.CancelledError:
            job.cancel()
            raise
        if outcome is None:
            raise Unavailable("the inference worker stopped")
        if isinstance(outcome, BaseException):
            raise Unavailable(f"recognition failed: {type(outcome).__name__}")
        assert isinstance(outcome, Hypothesis)
        return outcome


def _words(hypothesis: Hypothesis, window: Window) -> WordSource:
    """The hypothesis' words (timed from the window's start) as the loop takes them."""

    def source(segments: list[Segment]) -> tuple[list[list[dict[str, Any]]], float]:
        words: Sequence[Any] = hypothesis.words
        median = median_word_s([w.end - w.start for w in words])
        return words_by_text(segments, words, window.offset), median

    return source
