"""WhisperRecognizer: the real model behind the streaming core's Recognizer seam."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..audio.mel import FRAMES_PER_SECOND, N_FRAMES
from .decoding import DecodeOptions, decode, with_temperature
from .recognizer import Hypothesis, HypothesisWord, RecognitionRequest
from .timing import clamp_long_words, find_alignment, merge_punctuations
from .tokenizer import get_tokenizer
from .whisper import Whisper


@dataclass(frozen=True)
class RecognizerOptions:
    """How the model serves streaming requests.

    ``audio_ctx`` "fit" encodes only the filled part of a window (rounded up to ``ctx_step_s``
    and at least ``min_ctx_s``), as whisper.cpp's audio_ctx does: a 5 s window costs a sixth of
    a 30 s one. "full" pads every window to 30 s as the reference does.
    """

    beam_size: int | None = None
    temperatures: tuple[float, ...] = (0.0, 0.4)
    compression_ratio_threshold: float = 2.4
    logprob_threshold: float = -1.0
    no_speech_threshold: float = 0.6
    audio_ctx: str = "fit"
    ctx_step_s: float = 2.0
    min_ctx_s: float = 6.0
    max_new_tokens: int = 128
    # Speech runs at 2-4 tokens per second; a window decoding far more is looping. Capping the
    # tokens at this rate (plus a few) bounds the cost of a loop before the guards drop it.
    max_tokens_per_s: float = 6.0
    pad: str = "silence"  # pad short windows with the mel of silence ("silence") or with 0 ("zero")

    def __post_init__(self) -> None:
        if self.audio_ctx not in ("fit", "full"):
            raise ValueError("audio_ctx must be 'fit' or 'full'")


class WhisperRecognizer:
    """The real model behind the :class:`Recognizer` seam (runs on the inference thread)."""

    def __init__(self, model: Whisper, options: RecognizerOptions | None = None) -> None:
        self.model = model
        self.options = options or RecognizerOptions()
        self._tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)
        # fallback sampling is seeded: the same audio gives the same captions
        self._generator = torch.Generator(device=model.device).manual_seed(0)

    def encode_text(self, text: str) -> list[int]:
        return self._tokenizer.encode(text)

    def _frames(self, n: int) -> int:
        if self.options.audio_ctx == "full":
            return N_FRAMES
        step = round(self.options.ctx_step_s * FRAMES_PER_SECOND)
        target = max(-(-n // step) * step, round(self.options.min_ctx_s * FRAMES_PER_SECOND))
        return min(N_FRAMES, target)

    @torch.inference_mode()
    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        """One hypothesis per request: windows encoded as one batch, then decoded one by one."""
        if not requests:
            return []
        model = self.model
        frames = max(self._frames(r.mel.shape[-1]) for r in requests)
        batch = np.zeros((len(requests), model.dims.n_mels, frames), dtype=np.float32)
        for i, r in enumerate(requests):
            n = min(r.mel.shape[-1], frames)
            if self.options.pad == "silence" and r.mel.size:
                # normalised log-mel bottoms out at max - 2 ((max - 8 + 4) / 4): digital silence
                batch[i] = r.mel.max() - 2.0
            batch[i, :, :n] = r.mel[:, -n:] if r.mel.shape[-1] > frames else r.mel[:, :n]
        features = model.encoder(torch.from_numpy(batch).to(model.device, model.dtype))
        return [self._decode_one(r, features[i : i + 1]) for i, r in enumerate(requests)]

    def _decode_one(self, request: RecognitionRequest, features: torch.Tensor) -> Hypothesis:
        model, opts = self.model, self.options
        cache = model.new_cache(features)
        base = DecodeOptions(
            task=request.task,
            language=request.language if model.is_multilingual else "en",
            beam_size=opts.beam_size,
            prompt=tuple(request.prompt) or None,
            prefix=tuple(request.prefix) or None,
            without_timestamps=True,
            sample_len=min(opts.max_new_tokens, 8 + round(opts.max_tokens_per_s * request.mel.shape[-1] / FRAMES_PER_SECOND)),
        )
        result = None
        for temperature in opts.temperatures:
            result = decode(model, self._tokenizer, features, with_temperature(base, temperature), cache, self._generator)[0]
            retry = result.compression_ratio > opts.compression_ratio_threshold or (
                result.avg_logprob < opts.logprob_threshold and result.no_speech_prob <= opts.no_speech_threshold
            )
            if not retry:
                break
        assert result is not None
        tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages, language=result.language, task=request.task)
        words: tuple[HypothesisWord, ...] = ()
        prefix = [t for t in request.prefix if t < tokenizer.eot]
        text_tokens = [t for t in result.tokens if t < tokenizer.eot]
        if request.word_timestamps and text_tokens:
            n_frames = min(request.mel.shape[-1], N_FRAMES)
            # Align the prefix too (better timings), then keep only the words after it.
            alignment = find_alignment(model, tokenizer, prefix + text_tokens, cache, n_frames)
            clamp_long_words(alignment)
            merge_punctuations(alignment)
            limit = n_frames / FRAMES_PER_SECOND
            seen = 0
            kept = []
            for timing in alignment:
                first = seen
                seen += len(timing.tokens)
                if timing.word and first >= len(prefix):
                    kept.append(HypothesisWord(timing.word, min(timing.start, limit), min(timing.end, limit), timing.probability))
            words = tuple(kept)
        return Hypothesis(
            text=result.text,
            tokens=tuple(result.tokens),
            words=words,
            avg_logprob=result.avg_logprob,
            no_speech_prob=result.no_speech_prob,
            compression_ratio=result.compression_ratio,
            language=result.language,
            temperature=result.temperature,
        )
