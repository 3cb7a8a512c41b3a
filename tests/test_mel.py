"""Tests for streamwhisper.audio.mel's one-shot ``log_mel`` of a whole file, computed block by block."""

from __future__ import annotations

import tracemalloc

import numpy as np

from streamwhisper.audio.mel import (
    HOP_LENGTH,
    MEL_BLOCK_FRAMES,
    SAMPLE_RATE,
    log_mel,
    normalize_log_mel,
    power_frames,
    raw_log_mel,
    stft_frames,
)


def _speechlike(seconds: float, seed: int = 0) -> np.ndarray:
    """Noise whose loudness changes every second, so that frames differ across a block's edge."""
    rng = np.random.default_rng(seed)
    n = round(seconds * SAMPLE_RATE)
    gain = np.repeat(rng.uniform(0.01, 0.5, size=n // SAMPLE_RATE + 1), SAMPLE_RATE)[:n]
    return (rng.standard_normal(n) * gain).astype(np.float32)


def test_a_file_longer_than_a_block_gives_every_frame_as_in_one_pass() -> None:
    x = _speechlike(2.5 * MEL_BLOCK_FRAMES * HOP_LENGTH / SAMPLE_RATE)  # three blocks, the last one partial
    one_pass = normalize_log_mel(raw_log_mel(power_frames(np.ascontiguousarray(stft_frames(x))), 80)).T
    blocks = log_mel(x)
    assert blocks.shape == one_pass.shape == (80, len(x) // HOP_LENGTH)
    # the same spectra; the filterbank's matrix product may round the last bit differently by block
    np.testing.assert_allclose(blocks, one_pass, rtol=0, atol=1e-6)
    edges = [MEL_BLOCK_FRAMES - 1, MEL_BLOCK_FRAMES, 2 * MEL_BLOCK_FRAMES - 1, 2 * MEL_BLOCK_FRAMES]
    assert not np.allclose(blocks[:, edges[0]], blocks[:, edges[1]])  # (frames that differ at the edges)


def test_the_log_mel_of_a_long_file_needs_little_beyond_its_audio_and_its_mel() -> None:
    x = _speechlike(300.0)  # 5 minutes: 19 MB of audio, 9.6 MB of mel
    tracemalloc.start()
    try:
        mel = log_mel(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the padded audio, the raw mel and a few normalised copies of it; whole-file spectra took 17x the audio
    assert peak < x.nbytes + 5 * mel.nbytes + 20 * 2**20
