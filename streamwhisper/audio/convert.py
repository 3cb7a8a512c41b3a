"""Pure sample-format conversion and resampling (numpy + soxr, no I/O).

* :func:`pcm_to_float32` turns raw audio bytes (little-endian ``pcm_s16le`` or ``pcm_f32le``, or
  G.711 ``pcm_mulaw`` / ``pcm_alaw``, interleaved channels) into mono float32 samples, downmixing
  by averaging the channels.
* :func:`float32_to_pcm` is the inverse for mono float32 in ``[-1, 1]`` (:func:`float32_to_pcm_s16le`
  for the common case).
* :class:`StreamResampler` resamples a stream chunk by chunk to 16 kHz with a stateful
  ``soxr.ResampleStream``; :func:`resample` does the same for a whole signal at once.
"""

from __future__ import annotations

import functools
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
    "float32_to_pcm",
    "float32_to_pcm_s16le",
    "pcm_to_float32",
    "resample",
    "validate_sample_rate",
]

MIN_SAMPLE_RATE: Final = 8_000
MAX_SAMPLE_RATE: Final = 192_000

#: Accepted raw encodings and the numpy dtype of one sample (G.711 bytes are codes, decoded by table).
PCM_ENCODINGS: Final[dict[str, np.dtype]] = {
    "pcm_s16le": np.dtype("<i2"),
    "pcm_f32le": np.dtype("<f4"),
    "pcm_mulaw": np.dtype("u1"),  # G.711 mu-law (telephony, 8 kHz)
    "pcm_alaw": np.dtype("u1"),  # G.711 A-law
}
_G711: Final = ("pcm_mulaw", "pcm_alaw")
# Segment ends of G.711's encoders (ITU-T G.711; 14-bit magnitudes for mu-law, 13-bit for A-law).
_MULAW_ENDS: Final = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_ALAW_ENDS: Final = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])

_SOXR_QUALITY: Final = "HQ"


def pcm_to_float32(data: bytes | bytearray | memoryview, encoding: str, channels: int) -> np.ndarray:
    """Decode interleaved little-endian PCM bytes into mono float32 samples.

    ``pcm_s16le`` is scaled by 1/32768; ``pcm_f32le`` is taken as is; G.711 codes are expanded to
    16-bit values (at most 32124 for mu-law, 32256 for A-law) and scaled alike. Several channels are
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
    if encoding in _G711:
        out = _g711_table(encoding)[samples]
    elif dtype.kind == "i":
        out = samples.astype(np.float32) * np.float32(1.0 / 32768.0)
    else:
        out = samples.astype(np.float32)
        if not np.isfinite(out).all():
            bad = int(np.count_nonzero(~np.isfinite(out)))
            raise AudioFormatError(f"{encoding} audio contains {bad} non-finite sample(s) (NaN or Inf)")
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


def float32_to_pcm(x: np.ndarray, encoding: str) -> bytes:
    """Encode mono float samples in ``[-1, 1]`` as ``encoding`` (one of :data:`PCM_ENCODINGS`).

    G.711 encodes the 16-bit value of each sample as ITU-T G.711 does (the reference's segment
    search, so every code decodes back within half a quantisation step). Raises
    :class:`AudioFormatError` for an unknown encoding.
    """
    if encoding == "pcm_f32le":
        return np.asarray(x, dtype="<f4").ravel().tobytes()
    if encoding not in PCM_ENCODINGS:
        raise AudioFormatError(f"unknown PCM encoding {encoding!r}")
    pcm = float32_to_pcm_s16le(x)
    if encoding == "pcm_s16le":
        return pcm
    linear = np.frombuffer(pcm, "<i2").astype(np.int32)
    if encoding == "pcm_mulaw":
        mask = np.where(linear < 0, 0x7F, 0xFF)
        value = np.minimum(np.abs(linear >> 2), 8159) + 0x21  # 14 bits, biased
        segment = np.searchsorted(_MULAW_ENDS, value)
        code = (segment << 4) | ((value >> (segment + 1)) & 0xF)
    else:
        value = linear >> 3  # 13 bits
        mask = np.where(value >= 0, 0xD5, 0x55)
        value = np.where(value >= 0, value, -value - 1)
        segment = np.searchsorted(_ALAW_ENDS, value)
        code = (segment << 4) | ((value >> np.maximum(segment, 1)) & 0xF)
    code = np.where(segment >= 8, 0x7F, code)  # beyond the last segment: the largest code
    return (code ^ mask).astype(np.uint8).tobytes()


@functools.cache
def _g711_table(encoding: str) -> np.ndarray:
    """float32 value of each of the 256 G.711 codes of ``encoding``."""
    codes = np.arange(256)
    if encoding == "pcm_mulaw":
        u = ~codes & 0xFF
        exponent, mantissa = (u >> 4) & 7, u & 0xF
        magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
        positive = u & 0x80 == 0
    else:
        a = codes ^ 0x55
        exponent, mantissa = (a >> 4) & 7, a & 0xF
        magnitude = np.where(
            exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0)
        )
        positive = a & 0x80 != 0
    return (np.where(positive, magnitude, -magnitude) / 32768.0).astype(np.float32)


def validate_sample_rate(rate: int) -> int:
    """Return ``rate`` as an int if it is an integer in 8000..192000 Hz, else raise ConfigError."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)):
        raise ConfigError(f"sample rate must be an integer number of Hz, got {rate!r}")
    if not MIN_SAMPLE_RATE <= int(rate) <= MAX_SAMPLE_RATE:
        raise ConfigError(f"sample rate {int(rate)} Hz is out of range ({MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE} Hz)")
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
            self._stream = soxr.ResampleStream(self.in_rate, self.out_rate, 1, dtype="float32", quality=_SOXR_QUALITY)

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
        tail = np.asarray(self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True), dtype=np.float32)
        self._stream.clear()
        return tail
