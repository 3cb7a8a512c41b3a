"""WhisperRecognizer: the real model behind the streaming core's Recognizer seam."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import cast

import numpy as np
import torch

from ..whisper_input import FRAMES_PER_SECOND, N_FRAMES
from .batch_decoding import Cross, decode_greedy_batch, window_cache, window_cross
from .config import RecognizerConfig
from .decoding import DecodeOptions, DecodingResult, decode, kept_prefix, sampling_seed, with_temperature
from .fallback import FallbackRule
from .kv_cache import KVCache
from .recognizer import Hypothesis, HypothesisWord, RecognitionRequest
from .timing import clamp_long_words, find_alignment, merge_punctuations
from .tokenizer import Task, get_tokenizer
from .whisper import Whisper

logger = logging.getLogger(__name__)

# A window alone that loops at a fitted context (20 s) is decoded again at each of these
# contexts in turn (seconds, those longer than the one it looped at) until it does not; one
# served as in a batch too when ``RecognizerConfig.retry_batch_loops``.
LOOP_RETRY_S = (20.0, 30.0)


class WhisperRecognizer:
    """The real model behind the :class:`Recognizer` seam (runs on the inference thread)."""

    def __init__(self, model: Whisper, config: RecognizerConfig | None = None) -> None:
        self.model = model
        self.config = config or RecognizerConfig()
        self._tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages)
        # fallback sampling is seeded from each request (see _seed): the same audio gives the
        # same captions, whatever the recogniser served before (one generator per calling thread)
        self._local = threading.local()

    @property
    def _generator(self) -> torch.Generator:
        if not hasattr(self._local, "generator"):
            self._local.generator = torch.Generator(device=self.model.device)
        return cast(torch.Generator, self._local.generator)

    def encode_text(self, text: str) -> list[int]:
        """The token ids of ``text``, as a request's ``prompt_text`` and ``prefix_text`` are encoded."""
        return self._tokenizer.encode(text)

    def _frames(self, request: RecognitionRequest, batch_size: int, detect: bool = False) -> int:
        cfg, n = self.config, request.mel.shape[-1]
        if cfg.audio_ctx == "full" or request.timestamps:
            return N_FRAMES
        alone = self._alone(batch_size)
        if alone and detect:  # a multilingual model detects the language at 30 s, as the reference
            return N_FRAMES
        step = round(cfg.ctx_step_s * FRAMES_PER_SECOND)
        least = cfg.alone_min_ctx_s if alone else cfg.min_ctx_s
        if request.endpoint and not alone:
            least = max(least, cfg.endpoint_min_ctx_s)
        return min(N_FRAMES, max(-(-n // step) * step, round(least * FRAMES_PER_SECOND)))

    def _alone(self, batch_size: int) -> bool:
        """Whether a batch of ``batch_size`` windows is served as a window alone (``audio_ctx``)."""
        return self.config.audio_ctx == "auto" and batch_size <= self.config.full_ctx_max_batch

    @torch.inference_mode()
    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Hypothesis]:
        """One hypothesis per request, in order.

        A request's ``prompt_text`` and ``prefix_text`` are encoded here, on the caller's
        (inference) thread. Windows of the same fitted length are encoded together (each window
        at its own audio context, which depends on the batch only through the size rule of
        ``audio_ctx="auto"``); the first, greedy, pass decodes every window at once; a window
        alone that loops at a fitted context is decoded again at longer ones (``LOOP_RETRY_S``),
        and the rare temperature fallbacks run one window at a time.
        """
        if not requests:
            return []
        requests = [r.with_tokens(self.encode_text) for r in requests]
        model, cfg = self.model, self.config
        size = max(len(requests), 2) if any(r.crowded for r in requests) else len(requests)  # (the size rules)
        detect = [model.is_multilingual and r.language is None for r in requests]
        frames = [self._frames(r, size, d) for r, d in zip(requests, detect, strict=True)]
        features = self._encode(requests, frames)
        windows = [window_cross(model, f) for f in features]
        beam = (cfg.beam_size or None) if size <= cfg.beam_max_batch else None
        bases = [self._decode_options(r, beam) for r in requests]
        fitted = [f.shape[1] < model.dims.n_audio_ctx for f in features]
        firsts: list[DecodingResult | None] = [None] * len(requests)
        # one window alone at 30 s, or with beam search: the reference path (about 5 % faster
        # than a batch of one); one greedy at a fitted context: the batched one, which stops a
        # loop as it starts (a window looping to its budget costs twice its decoding) (windows
        # decoded with timestamp tokens take the reference path)
        plain = [i for i, r in enumerate(requests) if not r.timestamps and r.temperatures is None]
        in_batch = len(plain) > 1 or any(fitted[i] for i in plain)
        if in_batch and self._stops_loops(bases[plain[0]], cfg.fallback):
            some = [windows[i] for i in plain]
            stop_loops = [fitted[i] for i in plain]
            batched = decode_greedy_batch(
                model, self._tokenizer, some, [bases[i] for i in plain], stop_loops=stop_loops
            )
            for i, decoded in zip(plain, batched, strict=True):
                firsts[i] = decoded
        hypotheses = []
        retry_loops = cfg.retry_batch_loops or self._alone(size)  # (a window that loops: _refit)
        for request, f, window, base, first, short in zip(
            requests, features, windows, bases, firsts, fitted, strict=True
        ):
            rule = cfg.fallback
            if request.temperatures is not None:
                rule = dataclasses.replace(rule, temperatures=request.temperatures)
            refit = partial(self._refit, request) if short and retry_loops else None
            result, cache = self._decode_with_fallback(
                base, f, window, first, seed=partial(_seed, request), rule=rule, refit=refit
            )
            hypotheses.append(self._finish(request, cache, result, base.sample_len or self.model.dims.n_text_ctx // 2))
        return hypotheses

    def _stops_loops(self, base: DecodeOptions, rule: FallbackRule) -> bool:
        """Whether a window decoded with ``base`` at ``rule``'s first temperature can take the
        batched greedy decoder, which stops a loop as it starts."""
        greedy = base.beam_size is None and base.best_of is None and rule.temperatures[0] == 0
        return self.config.batch_decode and greedy and base.without_timestamps

    def _refit(self, request: RecognitionRequest, frames: int) -> torch.Tensor | None:
        """The window's features at the next context of ``LOOP_RETRY_S`` longer than ``frames``
        audio frames (encoder frames, two mel frames each), or None past 30 s."""
        longer = [n for n in (round(s * FRAMES_PER_SECOND) for s in LOOP_RETRY_S) if n // 2 > frames]
        return self._encode([request], [min(longer[0], N_FRAMES)])[0] if longer else None

    def _encode(self, requests: Sequence[RecognitionRequest], frames: Sequence[int]) -> list[torch.Tensor]:
        """Each window's audio features (1, S_i, n_state) at ``frames[i]`` mel frames: windows
        of the same length are encoded together, at most ``encode_batch`` per encoder call."""
        model = self.model
        features: list[torch.Tensor] = [torch.empty(0)] * len(requests)
        step = self.config.encode_batch
        groups = [[i for i, f in enumerate(frames) if f == width] for width in sorted(set(frames))]
        for rows in (group[k : k + step] for group in groups for k in range(0, len(group), step)):
            width = frames[rows[0]]
            batch = np.zeros((len(rows), model.dims.n_mels, width), dtype=np.float32)
            filled = 0  # frames from here on are each row's padding, one value per row
            for j, i in enumerate(rows):
                mel = requests[i].mel
                n = min(mel.shape[-1], width)
                filled = max(filled, n)
                if self.config.pad == "silence" and mel.size:
                    # normalised log-mel bottoms out at max - 2 ((max - 8 + 4) / 4): digital silence
                    batch[j] = mel.max() - 2.0
                batch[j, :, :n] = mel[:, -n:] if mel.shape[-1] > width else mel[:, :n]
            encoded = model.encoder(torch.from_numpy(batch).to(model.device, model.dtype), filled)
            for j, i in enumerate(rows):
                features[i] = encoded[j : j + 1]
        return features

    def _decode_options(self, request: RecognitionRequest, beam_size: int | None) -> DecodeOptions:
        cfg = self.config
        seconds = request.mel.shape[-1] / FRAMES_PER_SECOND
        return DecodeOptions(
            task=request.task,
            language=request.language if self.model.is_multilingual else "en",
            beam_size=beam_size,
            prompt=tuple(request.prompt) or None,
            prefix=tuple(request.prefix) or None,
            without_timestamps=not request.timestamps,
            # (the scores of a decoding with timestamp tokens do not line up with its text tokens)
            alignment_scores=request.word_timestamps and not request.timestamps,
            # offline windows: Whisper's budget (n_text_ctx // 2), timestamp tokens included
            sample_len=None
            if request.timestamps
            else min(cfg.max_new_tokens, 8 + round(cfg.max_tokens_per_s * seconds)),
        )

    def _decode_with_fallback(
        self,
        base: DecodeOptions,
        features: torch.Tensor,
        window: Cross,
        first: DecodingResult | None = None,
        seed: Callable[[], int] = lambda: 0,
        rule: FallbackRule | None = None,
        refit: Callable[[int], torch.Tensor | None] | None = None,
    ) -> tuple[DecodingResult, KVCache]:
        """Decode at the fallback rule's temperatures until a result needs no fallback: the
        result and the cache it was decoded with (the window's cross-attention, for word timings).

        ``first``: the result at the first temperature, when already decoded (batched);
        ``seed()``: the sampling generator's seed for the window's first sampled attempt;
        ``refit(frames)``: for a window encoded at a shorter context than 30 s, its features at
        a longer one than ``frames`` (:meth:`_refit`). Whisper loops at the end of an audio
        context cut short far more than at the 30 s it was trained on: a first result that
        loops is decoded again from those, until it does not or the context is 30 s.
        The last temperature's sample is kept whatever it says, so it stops once it loops
        (``DecodeOptions.stop_loops``): the words before its loop are all the screening keeps.
        """
        rule = rule or self.config.fallback
        cache = window_cache(self.model, window)
        seeded = False

        def decode_at(temperature: float) -> DecodingResult:
            nonlocal seeded
            if temperature > 0 and not seeded:
                self._generator.manual_seed(seed())
                seeded = True
            options = with_temperature(base, temperature)
            if temperature > 0 and temperature == rule.temperatures[-1]:  # (the last attempt is kept)
                options = dataclasses.replace(options, stop_loops=True)
            return decode(self.model, self._tokenizer, features, options, cache, self._generator)[0]

        result = first if first is not None else decode_at(rule.temperatures[0])
        while refit is not None and (result.looped or rule.is_loop(result)):
            looped_at = features.shape[1]
            if (longer := refit(looped_at)) is None:
                break
            features = longer
            logger.debug("a window looped at %d audio frames: decoded again at %d", looped_at, features.shape[1])
            longer_window = window_cross(self.model, features)
            cache = window_cache(self.model, longer_window)
            if features.shape[1] < self.model.dims.n_audio_ctx and self._stops_loops(base, rule):
                result = decode_greedy_batch(self.model, self._tokenizer, [longer_window], [base], stop_loops=[True])[0]
            else:
                result = decode_at(rule.temperatures[0])
        final = rule.decode(decode_at, result)
        if final is not result:
            logger.debug("fallback from %.1f to %.1f", result.temperature, final.temperature)
        return final, cache

    def _finish(
        self, request: RecognitionRequest, cache: KVCache, result: DecodingResult, sample_len: int
    ) -> Hypothesis:
        """The hypothesis of a decoded window, with word timings when asked for."""
        model, task = self.model, cast(Task, request.task)
        n_languages = model.num_languages
        tokenizer = get_tokenizer(model.is_multilingual, num_languages=n_languages, language=result.language, task=task)
        words: tuple[HypothesisWord, ...] = ()
        # the part of the prefix decoding was forced to (a very long one loses its start)
        prefix = kept_prefix([t for t in request.prefix if t < tokenizer.eot], model.dims.n_text_ctx, sample_len)
        text_tokens = [t for t in result.tokens if t < tokenizer.eot]
        if request.word_timestamps and text_tokens:
            n_frames = min(request.mel.shape[-1], N_FRAMES)
            # Word probabilities from the decoding pass, which saw the prompt: the alignment
            # pass doesn't, and on a short window padded to 30 s it doubts words the decoder
            # was sure of (" you." at 0.01). Knowing them, the alignment pass skips the logits.
            decoded = _token_probabilities(result, tokenizer.eot, len(text_tokens))
            probs = None if decoded is None else [0.0] * len(prefix) + decoded
            # Align the prefix too (better timings), then keep only the words after it.
            alignment = find_alignment(
                model,
                tokenizer,
                prefix + text_tokens,
                cache,
                n_frames,
                token_probs=probs,
                scores=result.alignment_scores,
            )
            clamp_long_words(alignment)
            merge_punctuations(alignment)
            limit = n_frames / FRAMES_PER_SECOND
            seen = 0
            kept = []
            for timing in alignment:
                first = seen
                seen += len(timing.tokens)
                if timing.word and first >= len(prefix):
                    start, end = min(timing.start, limit), min(timing.end, limit)
                    kept.append(HypothesisWord(timing.word, start, end, timing.probability, timing.mark_probability))
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
            silent=self.config.fallback.is_silence(result),
            looping=self.config.fallback.is_loop(result),
        )


def _seed(request: RecognitionRequest) -> int:
    """A request's sampling seed: a fallback's sample depends on the window alone, not on the
    windows served before it (nor on the other sessions' windows in the same batch)."""
    return sampling_seed(request.mel, request.prompt + request.prefix)


def _token_probabilities(result: DecodingResult, eot: int, n_text: int) -> list[float] | None:
    """Probabilities of the result's text tokens as decoded, or None when decoding kept no
    per-token log-probs (beam search)."""
    logprobs = [lp for t, lp in zip(result.tokens, result.token_logprobs, strict=False) if t < eot]
    if len(result.token_logprobs) != len(result.tokens) or len(logprobs) != n_text:
        return None
    return [math.exp(lp) for lp in logprobs]
