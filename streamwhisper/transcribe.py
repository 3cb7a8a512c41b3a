"""Offline transcription of a whole recording, 30 s window after window (Whisper's transcribe).

Each window is decoded with Whisper's temperature fallback (:mod:`streamwhisper.model.fallback`);
the seek loop itself (segments, where the next window starts, prompt conditioning) is
:class:`~streamwhisper.window_loop.WindowLoop`, shared with the daemon's REST endpoints, which
compute the windows on the inference worker instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

import numpy as np
import torch

from .audio.mel import log_mel, pad_or_trim
from .errors import ConfigError
from .model.decoding import DecodeOptions, DecodingResult, decode, detect_language, sampling_seed, with_temperature
from .model.fallback import FallbackRule
from .model.timing import clamp_long_words, find_alignment, merge_punctuations
from .model.tokenizer import Task, Tokenizer, get_tokenizer
from .model.whisper import Whisper
from .whisper_input import HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE
from .window_loop import Segment, TranscriptionResult, Window, WindowLoop, Word

__all__ = ["Segment", "TranscribeOptions", "Transcriber", "TranscriptionResult", "Word", "decode_with_fallback"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TranscribeOptions:
    """Options of a whole-file transcription.

    ``decode`` holds the per-window decoding options; ``fallback`` the temperatures each window
    may be decoded at and Whisper's thresholds for trying the next one (and for skipping a
    silent window).
    """

    decode: DecodeOptions = field(default_factory=DecodeOptions)
    fallback: FallbackRule = field(default_factory=FallbackRule)
    condition_on_previous_text: bool = True
    initial_prompt: str | None = None
    word_timestamps: bool = False


def decode_with_fallback(
    model: Whisper,
    tokenizer: Tokenizer,
    features: torch.Tensor,
    decode_options: DecodeOptions,
    options: TranscribeOptions,
    seed: int = 0,
) -> DecodingResult:
    """Decode one window, retrying at higher temperatures while the fallback rule says so; the
    samples are drawn from ``seed`` (the same file gives the same transcript every run)."""
    cache = model.new_cache(features)
    generator = torch.Generator(device=features.device)
    generator.manual_seed(seed)

    def decode_at(temperature: float) -> DecodingResult:
        return decode(model, tokenizer, features, with_temperature(decode_options, temperature), cache, generator)[0]

    return options.fallback.decode(decode_at)


class Transcriber:
    """Transcribes whole recordings with one loaded model."""

    def __init__(self, model: Whisper) -> None:
        self.model = model

    def tokenizer(self, language: str | None, task: str) -> Tokenizer:
        """The tokenizer for a language and task; ConfigError for an unknown language."""
        try:
            multilingual, languages = self.model.is_multilingual, self.model.num_languages
            return get_tokenizer(multilingual, num_languages=languages, language=language, task=cast(Task, task))
        except ValueError as exc:
            raise ConfigError(f"{exc} (use a code such as 'en' or a name such as 'german')") from None

    @torch.inference_mode()
    def encode(self, mel: np.ndarray) -> torch.Tensor:
        """Audio features (1, 1500, n_state) of one (n_mels, N_FRAMES) mel window."""
        x = torch.from_numpy(np.ascontiguousarray(mel))[None].to(self.model.device, self.model.dtype)
        return self.model.encoder(x)

    @torch.inference_mode()
    def detect_language(self, audio: np.ndarray) -> dict[str, float]:
        """Language probabilities of the first 30 s (multilingual models)."""
        if not self.model.is_multilingual:
            return {"en": 1.0}
        mel = pad_or_trim(log_mel(audio[:N_SAMPLES], self.model.dims.n_mels, padding=N_SAMPLES))
        features = self.encode(mel)
        return detect_language(self.model, self.tokenizer(None, "transcribe"), self.model.new_cache(features))[0]

    @torch.inference_mode()
    def transcribe(
        self,
        audio: np.ndarray,
        options: TranscribeOptions | None = None,
        progress: Callable[[float, float], None] | None = None,
    ) -> TranscriptionResult:
        """Transcribe 16 kHz mono float32 ``audio``; ``progress(done_s, total_s)`` after each window."""
        options = options or TranscribeOptions()
        options.decode.validate()
        model = self.model
        mel = log_mel(audio, model.dims.n_mels, padding=N_SAMPLES)
        content_frames = mel.shape[-1] - N_FRAMES
        duration = content_frames * HOP_LENGTH / SAMPLE_RATE
        language = options.decode.language
        if language is None and model.is_multilingual:
            probs = detect_language(
                model, self.tokenizer(None, "transcribe"), model.new_cache(self.encode(pad_or_trim(mel)))
            )[0]
            language = max(probs, key=probs.__getitem__)
            log.info("detected language %s (p=%.2f)", language, probs[language])
        language = language or "en"
        tokenizer = self.tokenizer(language, options.decode.task)
        decode_options = replace(options.decode, language=language)

        loop = WindowLoop(audio, mel, tokenizer, replace(options, decode=decode_options))
        while (window := loop.next_window()) is not None:
            features = self.encode(window.mel)
            seed = sampling_seed(window.mel, window.prompt)
            window_options = replace(decode_options, prompt=window.prompt or None)
            result = decode_with_fallback(model, tokenizer, features, window_options, options, seed)
            words = partial(align_words, model, tokenizer, features, window) if options.word_timestamps else None
            loop.complete(window, result, words)
            if progress:
                progress(loop.done_s, duration)
        if progress and (not duration or loop.done_s < duration):
            progress(duration, duration)
        return loop.result(language)


def align_words(
    model: Whisper, tokenizer: Tokenizer, features: torch.Tensor, window: Window, segments: list[Segment]
) -> tuple[list[list[dict[str, Any]]], float]:
    """The words of a window's kept segments (absolute seconds), aligned by cross-attention, and
    the median word duration (a :data:`~streamwhisper.window_loop.WordSource`)."""
    per_segment = [[t for t in s.tokens if t < tokenizer.eot] for s in segments]
    text_tokens = [t for toks in per_segment for t in toks]
    alignment = find_alignment(model, tokenizer, text_tokens, model.new_cache(features), window.frames)
    median = clamp_long_words(alignment)
    merge_punctuations(alignment)
    out: list[list[dict[str, Any]]] = []
    index = 0
    for toks in per_segment:
        saved = 0
        words: list[dict[str, Any]] = []
        while index < len(alignment) and saved < len(toks):
            timing = alignment[index]
            if timing.word:
                start, end = round(window.offset + timing.start, 2), round(window.offset + timing.end, 2)
                words.append({"word": timing.word, "start": start, "end": end, "probability": timing.probability})
            saved += len(timing.tokens)
            index += 1
        out.append(words)
    return out, median
