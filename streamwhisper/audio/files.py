"""Decode audio files (wav, flac, mp3, ogg/opus, m4a/aac, webm, ...) with PyAV.

Every file is decoded to mono float32 at 16 kHz through PyAV's ``AudioResampler`` (FFmpeg's
swresample, the same downmix and resampling that ``ffmpeg -ac 1 -ar 16000`` applies).
Problems (missing file, a directory, unreadable or undecodable data, no audio stream) raise
:class:`~streamwhisper.errors.AudioFormatError` with a one-line message naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import av
import av.error
import numpy as np

from streamwhisper.audio.mel import SAMPLE_RATE
from streamwhisper.errors import AudioFormatError, AudioTooLongError

__all__ = ["iter_audio_chunks", "load_audio", "load_audio_stream"]

_Decodable = str | os.PathLike[str]


def _fail(path: _Decodable, reason: str) -> AudioFormatError:
    reason = " ".join(str(reason).split()) or "unknown error"
    return AudioFormatError(f"cannot decode audio file {os.fspath(path)!r}: {reason}")


def _reason(exc: BaseException) -> str:
    """A short reason without PyAV's errno and file-name decorations."""
    strerror = getattr(exc, "strerror", None)
    if isinstance(strerror, str) and strerror:
        return strerror
    return str(exc) or type(exc).__name__


def _check_path(path: _Decodable) -> Path:
    try:
        p = Path(path)
    except TypeError as exc:
        raise AudioFormatError(f"not a file path: {path!r}") from exc
    if not p.exists():
        raise _fail(path, "no such file")
    if p.is_dir():
        raise _fail(path, "is a directory")
    if not os.access(p, os.R_OK):
        raise _fail(path, "permission denied")
    return p


def _check_rate(sample_rate: int) -> int:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
    return sample_rate


def _make_resampler(sample_rate: int) -> av.AudioResampler:
    """A resampler to mono float32 at ``sample_rate``.

    ``rematrix_maxval=1`` makes swresample normalise its downmix matrix as it does for integer
    output (``ffmpeg -ac 1`` to s16, Whisper's reference loader): stereo becomes ``(L + R) / 2``
    instead of ``(L + R) / sqrt(2)``, so a downmix cannot exceed full scale.
    """
    return av.AudioResampler(
        format="flt", layout="mono", rate=sample_rate, options={"rematrix_maxval": "1.0"}
    )


def _decode(path: _Decodable, sample_rate: int, stream_in: IO[bytes] | None = None) -> Iterator[np.ndarray]:
    """Yield mono float32 blocks at ``sample_rate`` decoded from the first audio stream of ``path``
    (or of the open binary file ``stream_in``, then ``path`` only names it in errors).

    Undecodable packets are skipped; if no samples at all could be decoded after an error, the
    error is raised. A resampler is rebuilt if the stream changes format mid-file.
    """
    try:
        container = av.open(stream_in if stream_in is not None else str(_check_path(path)), mode="r")
    except (av.error.FFmpegError, OSError, ValueError, UnicodeDecodeError) as exc:
        raise _fail(path, _reason(exc)) from None
    try:
        if not container.streams.audio:
            raise _fail(path, "no audio stream")
        stream = container.streams.audio[0]
        resampler: av.AudioResampler | None = None
        setup: tuple[str, str, int] | None = None
        produced = 0
        first_error: BaseException | None = None
        try:
            for packet in container.demux(stream):
                try:
                    frames = packet.decode()
                except (av.error.FFmpegError, ValueError) as exc:
                    first_error = first_error or exc
                    continue
                for frame in frames:
                    key = (frame.format.name, frame.layout.name, frame.sample_rate)
                    if resampler is None or key != setup:
                        if resampler is not None:
                            for out in resampler.resample(None):
                                block = out.to_ndarray().reshape(-1)
                                produced += block.size
                                yield block
                        resampler = _make_resampler(sample_rate)
                        setup = key
                    frame.pts = None  # timestamps are irrelevant to a plain sample dump
                    for out in resampler.resample(frame):
                        block = out.to_ndarray().reshape(-1)
                        produced += block.size
                        yield block
            if resampler is not None:
                for out in resampler.resample(None):
                    block = out.to_ndarray().reshape(-1)
                    produced += block.size
                    yield block
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            raise _fail(path, _reason(exc)) from None
        if produced == 0 and first_error is not None:
            raise _fail(path, _reason(first_error))
    finally:
        container.close()


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Decode an audio file into a 1-D mono float32 array at ``sample_rate`` Hz (default 16 kHz).

    Raises :class:`AudioFormatError` (message names the file) when the file is missing, is a
    directory, cannot be read or decoded, or has no audio stream. Decoded blocks are written
    into one growing buffer, so the signal is not held twice in memory.
    """
    sample_rate = _check_rate(sample_rate)
    return _collect(_decode(path, sample_rate), sample_rate, path, None)


def load_audio_stream(
    stream_in: IO[bytes], name: str, sample_rate: int = SAMPLE_RATE, max_seconds: float | None = None
) -> np.ndarray:
    """:func:`load_audio` for an open binary file (an upload): ``name`` names it in errors, and
    audio longer than ``max_seconds`` raises :class:`AudioFormatError` as soon as it is decoded."""
    sample_rate = _check_rate(sample_rate)
    return _collect(_decode(name, sample_rate, stream_in), sample_rate, name, max_seconds)


def _collect(blocks: Iterator[np.ndarray], sample_rate: int, path: _Decodable, max_seconds: float | None) -> np.ndarray:
    limit = None if max_seconds is None else round(max_seconds * sample_rate)
    buf = np.empty(sample_rate * 30, dtype=np.float32)
    n = 0
    for block in blocks:
        end = n + block.size
        if limit is not None and end > limit:
            raise AudioTooLongError(f"audio file {os.fspath(path)!r} is longer than {max_seconds:g} s")
        if end > buf.size:
            buf.resize(max(end, buf.size * 3 // 2), refcheck=False)  # realloc, no second copy
        buf[n:end] = block
        n = end
    buf.resize(n, refcheck=False)
    return buf


def iter_audio_chunks(
    path: str | Path, chunk_seconds: float = 30.0, sample_rate: int = SAMPLE_RATE
) -> Iterator[np.ndarray]:
    """Yield a long file as consecutive mono float32 chunks of ``chunk_seconds`` at ``sample_rate``.

    Every chunk but the last has exactly ``round(chunk_seconds * sample_rate)`` samples; nothing
    is yielded for a file without samples. A missing file or directory raises
    :class:`AudioFormatError` at call time; decoding errors are raised during iteration.
    """
    sample_rate = _check_rate(sample_rate)
    size = round(chunk_seconds * sample_rate)
    if size <= 0:
        raise ValueError(f"chunk_seconds must give at least one sample, got {chunk_seconds!r}")
    _check_path(path)
    return _chunks(path, size, sample_rate)


def _chunks(path: _Decodable, size: int, sample_rate: int) -> Iterator[np.ndarray]:
    buf = np.empty(size, dtype=np.float32)
    n = 0
    for block in _decode(path, sample_rate):
        pos = 0
        while pos < block.size:
            take = min(size - n, block.size - pos)
            buf[n : n + take] = block[pos : pos + take]
            n += take
            pos += take
            if n == size:
                yield buf.copy()
                n = 0
    if n:
        yield buf[:n].copy()
