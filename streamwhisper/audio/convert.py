"""Pure sample-format conversion and resampling (numpy + soxr, no I/O).

* :func:`pcm_to_float32` turns raw little-endian PCM bytes (``pcm_s16le`` or ``pcm_f32le``,
  interleaved channels) into mono float32 samples, downmixing by averaging the channels.
* :func:`float32_to_pcm_s16le` is the inverse for mono float32 in ``[-1, 1]``.
* :class:`StreamResampler` resamples a stream chunk by chunk to 16 kHz with a stateful
  ``soxr.ResampleStream``; :func:`resample` does the same for a whole signal at once.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import soxr

from streamwhisper.audio.mel import SAMPLE_RATE
from streamwhisper.errors import AudioFormatError, ConfigError

__all__ = [
    "MAX_SAMPLE_RATE",
    "MIN_SAMPLE_RATE",
    "PCM_ENCODINGS",
    "StreamResampler",
    "float32_to_pcm_s16le",
    "pcm_to_float32",
    "resample",
    "validate_sample_rate",
]

MIN_SAMPLE_RATE: Final = 8_000
MAX_SAMPLE_RATE: Final = 192_000

#: Accepted raw encodings and their little-endian numpy dtypes.
PCM_ENCODINGS: Final[dict[str, np.dtype]] = {
    "pcm_s16le": np.dtype("<i2"),
    "pcm_f32le": np.dtype("<f4"),
}

_SOXR_QUALITY: Final = "HQ"


def pcm_to_float32(
    data: bytes | bytearray | memoryview, encoding: str, channels: int
) -> np.ndarray:
    """Decode interleaved little-endian PCM bytes into mono float32 samples.

    ``pcm_s16le`` is scaled by 1/32768; ``pcm_f32le`` is taken as is. Several channels are
    downmixed by averaging. Raises :class:`AudioFormatError` for an unknown encoding, a channel
    count below 1, a byte count that is not a whole number of frames, or NaN/Inf float samples.
    """
    dtype = PCM_ENCODINGS.get(encoding)
    if dtype is None:
        known = ", ".join(sorted(PCM_ENCODINGS))
        raise AudioFormatError(f"unknown PCM encoding {encoding!r} (expected one of: {known})")
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise AudioFormatError(f"channel count must be a positive integer, got {channels!r}")
    frame_bytes = dtype.itemsize * channels
    n_bytes = len(memoryview(data).cast("B"))
    if n_bytes % frame_bytes:
        raise AudioFormatError(
            f"{n_bytes} bytes of {encoding} is not a whole number of frames "
            f"({dtype.itemsize} bytes per sample x {channels} channel(s) "
            f"= {frame_bytes} bytes per frame)"
        )
    samples = np.frombuffer(data, dtype=dtype)
    if dtype.kind == "i":
        out = samples.astype(np.float32) * np.float32(1.0 / 32768.0)
    else:
        out = samples.astype(np.float32)
        if not np.isfinite(out).all():
            bad = int(np.count_nonzero(~np.isfinite(out)))
            raise AudioFormatError(
                f"{encoding} audio contains {bad} non-finite sample(s) (NaN or Inf)"
            )
    if channels > 1:
        out = out.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return np.ascontiguousarray(out, dtype=np.float32)


def float32_to_pcm_s16le(x: np.ndarray) -> bytes:
    """Encode float samples in ``[-1, 1]`` as little-endian signed 16-bit PCM bytes.

    Samples are scaled by 32768, rounded and clipped to the int16 range; NaN becomes 0.
    ``pcm_to_float32(float32_to_pcm_s16le(x), "pcm_s16le", 1)`` is the identity for samples that
    are already multiples of 1/32768.
    """
    arr = np.nan_to_num(np.asarray(x, dtype=np.float32).ravel(), nan=0.0, posinf=1.0, neginf=-1.0)
    scaled = np.rint(arr.astype(np.float64) * 32768.0)
    return np.clip(scaled, -32768, 32767).astype("<i2").tobytes()


def validate_sample_rate(rate: int) -> int:
    """Return ``rate`` as an int if it is an integer in 8000..192000 Hz, else raise ConfigError."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)):
        raise ConfigError(f"sample rate must be an integer number of Hz, got {rate!r}")
    if not MIN_SAMPLE_RATE <= int(rate) <= MAX_SAMPLE_RATE:
        raise ConfigError(
            f"sample rate {int(rate)} Hz is out of range ({MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz)"
        )
    return int(rate)


def _as_mono_float32(x: np.ndarray) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim != 1:
        raise AudioFormatError(f"expected mono (1-D) samples, got an array of shape {arr.shape}")
    return np.ascontiguousarray(arr)


def resample(x: np.ndarray, from_rate: int, to_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Resample a whole mono signal from ``from_rate`` to ``to_rate`` (default 16 kHz) in one go.

    Returns float32; the input is returned (as float32) unchanged when the rates are equal.
    """
    from_rate = validate_sample_rate(from_rate)
    to_rate = validate_sample_rate(to_rate)
    arr = _as_mono_float32(x)
    if from_rate == to_rate or arr.size == 0:
        return arr
    out = soxr.resample(arr, from_rate, to_rate, quality=_SOXR_QUALITY)
    return np.asarray(out, dtype=np.float32)


class StreamResampler:
    """Stateful streaming resampler for mono float32 audio, by default to 16 kHz.

    Feed chunks of any size to :meth:`process` and call :meth:`flush` at the end of the stream
    to get the resampler's tail; the concatenated output matches (up to soxr's streaming
    tolerance) a one-shot :func:`resample` of the whole signal. When the input rate already
    equals the output rate, chunks pass through untouched and soxr is not used. After
    :meth:`flush` the resampler is reset and may start a new stream.
    """

    def __init__(self, in_rate: int, out_rate: int = SAMPLE_RATE) -> None:
        """Create a resampler from ``in_rate`` to ``out_rate`` Hz (both within 8000..192000)."""
        self.in_rate = validate_sample_rate(in_rate)
        self.out_rate = validate_sample_rate(out_rate)
        self._stream: soxr.ResampleStream | None = None
        if self.in_rate != self.out_rate:
            self._stream = soxr.ResampleStream(
                self.in_rate, self.out_rate, 1, dtype="float32", quality=_SOXR_QUALITY
            )

    @property
    def passthrough(self) -> bool:
        """True when input and output rates are equal and chunks are returned unchanged."""
        return self._stream is None

    def process(self, x: np.ndarray) -> np.ndarray:
        """Resample the next mono chunk; output may lag the input by the filter's delay."""
        arr = _as_mono_float32(x)
        if self._stream is None:
            return arr
        return np.asarray(self._stream.resample_chunk(arr, last=False), dtype=np.float32)

    def flush(self) -> np.ndarray:
        """End the stream: return the remaining resampled samples and reset the internal state."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail = np.asarray(
            self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True), dtype=np.float32
        )
        self._stream.clear()
        return tail
