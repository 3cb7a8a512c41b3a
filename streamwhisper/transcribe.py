"""Offline transcription of a whole recording, 30 s window after window (Whisper's transcribe).

Each window is decoded with Whisper's temperature fallback (:mod:`streamwhisper.model.fallback`);
timestamp tokens split it into segments and say where the next window starts; the text so far
conditions the next window's decoding.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import torch

from .audio.mel import log_mel, pad_or_trim
from .errors import ConfigError
from .model.decoding import DecodeOptions, DecodingResult, decode, detect_language, with_temperature
from .model.fallback import FallbackRule
from .model.timing import clamp_long_words, find_alignment, merge_punctuations
from .model.tokenizer import Tokenizer, get_tokenizer
from .model.whisper import Whisper
from .whisper_input import FRAMES_PER_SECOND, HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, TIME_PRECISION

log = logging.getLogger(__name__)

INPUT_STRIDE = 2  # mel frames per audio token
DIGITAL_SILENCE = 1e-4  # peak amplitude (-80 dBFS) under which a window holds no signal


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float
    probability: float


@dataclass
class Segment:
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    temperature: float
    seek: int = 0
    words: list[Word] | None = None


@dataclass
class TranscriptionResult:
    text: str
    language: str
    segments: list[Segment]
    duration: float = 0.0


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
    model: Whisper, tokenizer: Tokenizer, features: torch.Tensor, decode_options: DecodeOptions, options: TranscribeOptions
) -> DecodingResult:
    """Decode one window, retrying at higher temperatures while the fallback rule says so."""
    cache = model.new_cache(features)

    def decode_at(temperature: float) -> DecodingResult:
        return decode(model, tokenizer, features, with_temperature(decode_options, temperature), cache)[0]

    return options.fallback.decode(decode_at)


class Transcriber:
    """Transcribes whole recordings with one loaded model."""

    def __init__(self, model: Whisper) -> None:
        self.model = model

    def tokenizer(self, language: str | None, task: str) -> Tokenizer:
        """The tokenizer for a language and task; ConfigError for an unknown language."""
        try:
            return get_tokenizer(self.model.is_multilingual, num_languages=self.model.num_languages, language=language, task=task)
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
            probs = detect_language(model, self.tokenizer(None, "transcribe"), model.new_cache(self.encode(pad_or_trim(mel))))[0]
            language = max(probs, key=probs.__getitem__)
            log.info("detected language %s (p=%.2f)", language, probs[language])
        language = language or "en"
        tokenizer = self.tokenizer(language, options.decode.task)
        decode_options = replace(options.decode, language=language)

        all_tokens: list[int] = []
        segments: list[Segment] = []
        prompt_reset_since = 0
        if options.initial_prompt:
            all_tokens.extend(tokenizer.encode(" " + options.initial_prompt.strip()))
        seek = 0
        last_speech = 0.0
        while seek < content_frames:
            time_offset = seek * HOP_LENGTH / SAMPLE_RATE
            segment_size = min(N_FRAMES, content_frames - seek)
            mel_segment = pad_or_trim(mel[:, seek : seek + segment_size])
            window_audio = audio[seek * HOP_LENGTH : (seek + segment_size) * HOP_LENGTH]
            if window_audio.size and float(np.abs(window_audio).max()) < DIGITAL_SILENCE:
                # Whisper hallucinates (" you") on digital zeros and its no-speech rule can't
                # tell: a window without signal has nothing to transcribe.
                seek += segment_size
                if progress:
                    progress(min(seek, content_frames) * HOP_LENGTH / SAMPLE_RATE, duration)
                continue
            features = self.encode(mel_segment)
            prompt = tuple(all_tokens[prompt_reset_since:])
            result = decode_with_fallback(model, tokenizer, features, replace(decode_options, prompt=prompt or None), options)
            if options.fallback.is_silence(result):
                seek += segment_size
                if progress:
                    progress(min(seek, content_frames) * HOP_LENGTH / SAMPLE_RATE, duration)
                continue
            current, seek_delta, single_ending = split_segments(result, tokenizer, time_offset, segment_size * HOP_LENGTH / SAMPLE_RATE)
            for seg in current:
                seg.seek = seek
            previous_seek = seek
            seek += seek_delta
            if options.word_timestamps:
                last_speech = add_word_timestamps(current, model, tokenizer, features, segment_size, last_speech)
                ends = [w.end for s in current for w in (s.words or [])]
                if not single_ending and ends and ends[-1] > time_offset:
                    seek = round(ends[-1] * FRAMES_PER_SECOND)
            for seg in current:
                # zero-length segments and text without a letter or digit (". . ." on noise)
                if seg.start == seg.end or not any(ch.isalnum() for ch in seg.text):
                    seg.text, seg.tokens, seg.words = "", [], [] if options.word_timestamps else None
            current = [s for s in current if s.text]
            segments.extend(current)
            all_tokens.extend(t for s in current for t in s.tokens)
            if not options.condition_on_previous_text or result.temperature > 0.5:
                prompt_reset_since = len(all_tokens)
            seek = max(seek, previous_seek + 1) if seek <= previous_seek else seek
            if progress:
                progress(min(seek, content_frames) * HOP_LENGTH / SAMPLE_RATE, duration)
        text = tokenizer.decode([t for s in segments for t in s.tokens if t < tokenizer.eot])
        return TranscriptionResult(text=text, language=language, segments=segments, duration=duration)


def split_segments(
    result: DecodingResult, tokenizer: Tokenizer, time_offset: float, window_duration: float
) -> tuple[list[Segment], int, bool]:
    """Cut a window's tokens into segments at timestamp pairs.

    Returns (segments, mel frames to advance, whether the window ended on a single timestamp).
    """
    tokens = result.tokens
    ts_begin = tokenizer.timestamp_begin
    is_ts = [t >= ts_begin for t in tokens]
    single_ending = is_ts[-2:] == [False, True]
    consecutive = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]

    def make(start: float, end: float, toks: list[int]) -> Segment:
        text_tokens = [t for t in toks if t < tokenizer.eot]
        return Segment(
            start=start,
            end=end,
            text=tokenizer.decode(text_tokens),
            tokens=toks,
            avg_logprob=result.avg_logprob,
            no_speech_prob=result.no_speech_prob,
            compression_ratio=result.compression_ratio,
            temperature=result.temperature,
        )

    window_frames = round(window_duration * FRAMES_PER_SECOND)
    if consecutive:
        slices = consecutive + ([len(tokens)] if single_ending else [])
        segments, last = [], 0
        for current in slices:
            piece = tokens[last:current]
            start = time_offset + (piece[0] - ts_begin) * TIME_PRECISION
            end = time_offset + (piece[-1] - ts_begin) * TIME_PRECISION
            segments.append(make(start, end, piece))
            last = current
        if single_ending:
            return segments, window_frames, True
        return segments, (tokens[last - 1] - ts_begin) * INPUT_STRIDE, False
    duration = window_duration
    stamps = [t for t in tokens if t >= ts_begin]
    if stamps and stamps[-1] != ts_begin:
        duration = (stamps[-1] - ts_begin) * TIME_PRECISION
    return [make(time_offset, time_offset + duration, tokens)], window_frames, single_ending


def add_word_timestamps(
    segments: list[Segment],
    model: Whisper,
    tokenizer: Tokenizer,
    features: torch.Tensor,
    num_frames: int,
    last_speech: float,
) -> float:
    """Give every segment its words (absolute seconds); returns the new last-speech time."""
    if not segments:
        return last_speech
    per_segment = [[t for t in s.tokens if t < tokenizer.eot] for s in segments]
    text_tokens = [t for toks in per_segment for t in toks]
    alignment = find_alignment(model, tokenizer, text_tokens, model.new_cache(features), num_frames)
    median = clamp_long_words(alignment)
    longest = median * 2
    merge_punctuations(alignment)
    time_offset = segments[0].seek * HOP_LENGTH / SAMPLE_RATE
    index = 0
    for segment, toks in zip(segments, per_segment):
        saved = 0
        words: list[dict[str, float | str]] = []
        while index < len(alignment) and saved < len(toks):
            timing = alignment[index]
            if timing.word:
                words.append(
                    {"word": timing.word, "start": round(time_offset + timing.start, 2), "end": round(time_offset + timing.end, 2), "probability": timing.probability}
                )
            saved += len(timing.tokens)
            index += 1
        if words:
            _adjust_edges(segment, words, median, longest, last_speech)
            last_speech = segment.end
        segment.words = [Word(str(w["word"]), float(w["start"]), float(w["end"]), float(w["probability"])) for w in words]
    return last_speech


def _adjust_edges(segment: Segment, words: list[dict], median: float, longest: float, last_speech: float) -> None:
    """Whisper's edge heuristics: no overlong first word after a pause; trust segment bounds."""
    first = words[0]
    if first["end"] - last_speech > median * 4 and (
        first["end"] - first["start"] > longest or (len(words) > 1 and words[1]["end"] - first["start"] > longest * 2)
    ):
        if len(words) > 1 and words[1]["end"] - words[1]["start"] > longest:
            boundary = max(words[1]["end"] / 2, words[1]["end"] - longest)
            first["end"] = words[1]["start"] = boundary
        first["start"] = max(0, first["end"] - longest)
    if segment.start < first["end"] and segment.start - 0.5 > first["start"]:
        first["start"] = max(0, min(first["end"] - median, segment.start))
    else:
        segment.start = first["start"]
    last = words[-1]
    if segment.end > last["start"] and segment.end + 0.5 < last["end"]:
        last["end"] = max(last["start"] + median, segment.end)
    else:
        segment.end = last["end"]
