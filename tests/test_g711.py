"""G.711 (mu-law and A-law) in streamwhisper.audio.convert, against Python's own ``audioop`` (the
reference C implementation, deprecated but present in 3.11) and the values ITU-T G.711 fixes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streamwhisper.audio.convert import PCM_ENCODINGS, float32_to_pcm, float32_to_pcm_s16le, pcm_to_float32
from streamwhisper.errors import AudioFormatError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

CODECS = {
    "pcm_mulaw": (audioop.ulaw2lin, audioop.lin2ulaw),
    "pcm_alaw": (audioop.alaw2lin, audioop.lin2alaw),
}
ALL_INT16 = np.arange(-32768, 32768, dtype="<i2")


@pytest.mark.parametrize("encoding", sorted(CODECS))
def test_every_code_decodes_as_the_reference_does(encoding: str) -> None:
    codes = bytes(range(256))
    expected = np.frombuffer(CODECS[encoding][0](codes, 2), "<i2")
    got = pcm_to_float32(codes, encoding, 1)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got * 32768.0, expected.astype(np.float32))


def test_known_code_values() -> None:
    def value(code: int, encoding: str) -> float:
        return float(pcm_to_float32(bytes([code]), encoding, 1)[0] * 32768)

    # mu-law: 0xFF and 0x7F are the two zeros, 0x00 / 0x80 the extremes
    assert (value(0xFF, "pcm_mulaw"), value(0x7F, "pcm_mulaw")) == (0.0, 0.0)
    assert (value(0x00, "pcm_mulaw"), value(0x80, "pcm_mulaw")) == (-32124.0, 32124.0)
    # A-law: 0xD5 / 0x55 are the smallest magnitudes (+8 / -8), 0xAA / 0x2A the extremes
    assert (value(0xD5, "pcm_alaw"), value(0x55, "pcm_alaw")) == (8.0, -8.0)
    assert (value(0xAA, "pcm_alaw"), value(0x2A, "pcm_alaw")) == (32256.0, -32256.0)


@pytest.mark.parametrize("encoding", sorted(CODECS))
def test_every_16_bit_value_encodes_as_the_reference_does(encoding: str) -> None:
    got = float32_to_pcm(ALL_INT16.astype(np.float32) / 32768.0, encoding)
    assert got == CODECS[encoding][1](ALL_INT16.tobytes(), 2)


@pytest.mark.parametrize("encoding", sorted(CODECS))
def test_a_round_trip_stays_within_the_quantisation_step(encoding: str) -> None:
    x = np.random.default_rng(1).uniform(-0.98, 0.98, 4000).astype(np.float32)
    back = pcm_to_float32(float32_to_pcm(x, encoding), encoding, 1)
    # logarithmic steps: at most 1/16 of the magnitude (plus the finest step near zero)
    assert np.all(np.abs(back - x) <= np.abs(x) / 16 + 16 / 32768)


def test_channels_and_frames() -> None:
    stereo = np.array([0xFF, 0x80, 0x80, 0x80], np.uint8).tobytes()  # frames (0, 32124), (32124, 32124)
    np.testing.assert_allclose(pcm_to_float32(stereo, "pcm_mulaw", 2) * 32768, [16062, 32124])
    with pytest.raises(AudioFormatError, match="whole number of frames"):
        pcm_to_float32(b"\x00\x00\x00", "pcm_alaw", 2)


def test_float32_to_pcm_covers_every_encoding() -> None:
    x = np.array([0.0, 0.5, -0.25], np.float32)
    assert float32_to_pcm(x, "pcm_s16le") == float32_to_pcm_s16le(x)
    assert float32_to_pcm(x, "pcm_f32le") == x.astype("<f4").tobytes()
    for encoding in PCM_ENCODINGS:
        data = float32_to_pcm(x, encoding)
        assert len(data) == 3 * PCM_ENCODINGS[encoding].itemsize
        np.testing.assert_allclose(pcm_to_float32(data, encoding, 1), x, atol=0.25 / 16 + 1e-4)
    with pytest.raises(AudioFormatError, match="pcm_u8"):
        float32_to_pcm(x, "pcm_u8")
