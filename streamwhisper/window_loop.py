"""Whisper's seek loop over a whole recording, without the model: which 30 s window comes next,
what prompt conditions it, and what a decoded window adds to the transcript.

:class:`WindowLoop` is the pure half of offline transcription. Whoever owns the model computes
each :class:`Window` it hands out and gives the result back with :meth:`WindowLoop.complete`:
:class:`~streamwhisper.transcribe.Transcriber` decodes in-process, the daemon's REST endpoints
(:mod:`streamwhisper.runtime.offline`) as requests to the shared inference worker. Timestamp
tokens split a window into segments and say where the next window starts; the text so far
conditions the next window's decoding. Imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .audio.mel import pad_or_trim
from .whisper_input import FRAMES_PER_SECOND, HOP_LENGTH, N_FRAMES, SAMPLE_RATE, TIME_PRECISION

if TYPE_CHECKING:
    from .model.fallback import FallbackRule
    from .model.tokenizer import Tokenizer

INPUT_STRIDE = 2  # mel frames per audio token
DIGITAL_SILENCE = 1e-4  # peak amplitude (-80 dBFS) under which a window holds no signal
MAX_PROMPT_TOKENS = 223  # Whisper keeps the last n_text_ctx // 2 - 1 tokens of a prompt


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


class DecodedWindow(Protocol):
    """What the loop reads in a window's decoding (a ``DecodingResult`` or a ``Hypothesis``):
    its tokens with timestamp tokens, and the figures Whisper's rules judge it by."""

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def avg_logprob(self) -> float: ...

    @property
    def no_speech_prob(self) -> float: ...

    @property
    def compression_ratio(self) -> float: ...

    @property
    def temperature(self) -> float: ...


class LoopOptions(Protocol):
    """What the loop reads of a transcription's options (``TranscribeOptions``)."""

    @property
    def fallback(self) -> FallbackRule: ...

    @property
    def condition_on_previous_text(self) -> bool: ...

    @property
    def initial_prompt(self) -> str | None: ...

    @property
    def word_timestamps(self) -> bool: ...


# Given a window's kept segments: each segment's words ({"word", "start", "end", "probability"},
# absolute seconds) and the median word duration.
WordSource = Callable[[list[Segment]], tuple[list[list[dict[str, Any]]], float]]


@dataclass(frozen=True)
class Window:
    """One window to decode: ``frames`` mel frames from ``seek``, padded to 30 s in ``mel``."""

    seek: int
    frames: int
    mel: np.ndarray
    prompt: tuple[int, ...]

    @property
    def offset(self) -> float:
        return self.seek * HOP_LENGTH / SAMPLE_RATE

    @property
    def seconds(self) -> float:
        return self.frames * HOP_LENGTH / SAMPLE_RATE


class WindowLoop:
    """The seek loop of one recording.

    Args:
        audio: the 16 kHz mono recording (only read to skip windows of digital silence).
        mel: its log-mel, padded with 30 s of silence as ``log_mel(audio, padding=N_SAMPLES)``.
        tokenizer: the tokenizer of the recording's language and task.
        options: the transcription's options (prompt conditioning, fallback rule, word timings).
    """

    def __init__(self, audio: np.ndarray, mel: np.ndarray, tokenizer: Tokenizer, options: LoopOptions) -> None:
        self.audio, self.mel, self.tokenizer, self.options = audio, mel, tokenizer, options
        self.content_frames = mel.shape[-1] - N_FRAMES
        self.duration = self.content_frames * HOP_LENGTH / SAMPLE_RATE
        self.seek = 0
        self.segments: list[Segment] = []
        self._tokens: list[int] = []
        self._prompt_from = 0
        self._last_speech = 0.0
        if options.initial_prompt:
            self._tokens.extend(tokenizer.encode(" " + options.initial_prompt.strip()))

    @property
    def done_s(self) -> float:
        """Seconds of the recording transcribed so far."""
        return min(self.seek, self.content_frames) * HOP_LENGTH / SAMPLE_RATE

    def next_window(self) -> Window | None:
        """The next window to decode; None when the recording is done."""
        while self.seek < self.content_frames:
            size = min(N_FRAMES, self.content_frames - self.seek)
            samples = self.audio[self.seek * HOP_LENGTH : (self.seek + size) * HOP_LENGTH]
            if samples.size and float(np.abs(samples).max()) < DIGITAL_SILENCE:
                # Whisper hallucinates (" you") on digital zeros and its no-speech rule can't
                # tell: a window without signal has nothing to transcribe.
                self.seek += size
                continue
            prompt = tuple(self._tokens[self._prompt_from :])
            return Window(self.seek, size, pad_or_trim(self.mel[:, self.seek : self.seek + size]), prompt)
        return None

    def complete(self, window: Window, result: DecodedWindow, words: WordSource | None = None) -> list[Segment]:
        """Take a window's decoding; returns the segments it adds to the transcript.

        ``words`` gives the kept segments their words (with ``options.word_timestamps``).
        """
        options = self.options
        if options.fallback.is_silence(result):
            self.seek = window.seek + window.frames
            return []
        current, seek_delta, single_ending = split_segments(result, self.tokenizer, window.offset, window.seconds)
        # A window short of 30 s is padded with silence, which a looping decoder may go on
        # "hearing" ("Come on." a second to 12 s past the end of a radio recording): no
        # segment begins after the window's audio, nor ends after it.
        audio_end = window.offset + window.seconds
        current = [seg for seg in current if seg.start < audio_end]
        for seg in current:
            seg.end = min(seg.end, audio_end)
            seg.seek = window.seek
        self.seek = window.seek + seek_delta
        if options.word_timestamps and words is not None:
            self._add_words(current, words)
            ends = [w.end for s in current for w in (s.words or [])]
            if not single_ending and ends and ends[-1] > window.offset:
                self.seek = round(ends[-1] * FRAMES_PER_SECOND)
        for seg in current:
            # zero-length segments and text without a letter or digit (". . ." on noise)
            if seg.start == seg.end or not any(ch.isalnum() for ch in seg.text):
                seg.text, seg.tokens, seg.words = "", [], [] if options.word_timestamps else None
        current = [s for s in current if s.text]
        self.segments.extend(current)
        self._tokens.extend(t for s in current for t in s.tokens)
        if not options.condition_on_previous_text or result.temperature > 0.5:
            self._prompt_from = len(self._tokens)
        if self.seek <= window.seek:
            self.seek = window.seek + 1
        return current

    def result(self, language: str) -> TranscriptionResult:
        tokenizer = self.tokenizer
        text = tokenizer.decode([t for s in self.segments for t in s.tokens if t < tokenizer.eot])
        return TranscriptionResult(text=text, language=language, segments=self.segments, duration=self.duration)

    def _add_words(self, segments: list[Segment], source: WordSource) -> None:
        if not segments:
            return
        per_segment, median = source(segments)
        longest = median * 2
        for segment, words in zip(segments, per_segment, strict=True):
            if words:
                _adjust_edges(segment, words, median, longest, self._last_speech)
                self._last_speech = segment.end
            segment.words = [
                Word(str(w["word"]), float(w["start"]), float(w["end"]), float(w["probability"])) for w in words
            ]


def split_segments(
    result: DecodedWindow, tokenizer: Tokenizer, time_offset: float, window_duration: float
) -> tuple[list[Segment], int, bool]:
    """Cut a window's tokens into segments at timestamp pairs.

    Returns (segments, mel frames to advance, whether the window ended on a single timestamp).
    """
    tokens = list(result.tokens)
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


def median_word_s(durations: Sequence[float]) -> float:
    """The median of the non-zero word durations, at most 0.7 s (Whisper's word-edge rules)."""
    nonzero = [d for d in durations if d]
    return min(0.7, float(np.median(nonzero))) if nonzero else 0.0


def words_by_text(segments: list[Segment], words: Sequence[Any], offset: float) -> list[list[dict[str, Any]]]:
    """Hand a window's words (``word``, ``start``, ``end``, ``probability``; times from
    ``offset``) to the segments whose text they spell, in order; words after the last segment's
    text (the unfinished segment the next window decodes again) are dropped."""
    out: list[list[dict[str, Any]]] = [[] for _ in segments]
    bounds, total = [], 0
    for seg in segments:
        total += len(seg.text.strip()) + (1 if seg.text.strip() else 0)
        bounds.append(total)
    spelled, i = 0, 0
    for w in words:
        text = w.word.strip()
        middle = spelled + len(text) / 2
        while i < len(segments) and middle > bounds[i]:
            i += 1
        if i == len(segments):
            break
        spelled += len(text) + 1
        out[i].append(
            {
                "word": w.word,
                "start": round(offset + w.start, 2),
                "end": round(offset + w.end, 2),
                "probability": w.probability,
            }
        )
    return out


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
