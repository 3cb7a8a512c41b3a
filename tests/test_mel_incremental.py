"""IncrementalLogMel equals the one-shot reference for any chunking of the stream."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamwhisper.audio.mel import (
    HOP_LENGTH,
    IncrementalLogMel,
    log_mel,
    normalize_log_mel,
    power_frames,
    raw_log_mel,
    stft_frames,
)


def _signal(seed: int, n: int) -> np.ndarray:
    """Noise with a loud tone burst early on, so the window maximum is not in the tail."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32) * 0.05
    t = np.arange(min(n, 2000)) / 16_000
    x[: t.shape[0]] += (0.8 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return x


def _reference_raw(x: np.ndarray, n_mels: int = 80) -> np.ndarray:
    return raw_log_mel(power_frames(stft_frames(x)), n_mels).T


def _feed(mel: IncrementalLogMel, x: np.ndarray, cuts: list[int]) -> None:
    pos = 0
    for cut in sorted(set(cuts)):
        mel.feed(x[pos:cut])
        pos = cut
    mel.feed(x[pos:])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(201, 12_000),
    cuts=st.lists(st.integers(0, 12_000), max_size=12),
    origin=st.integers(0, 100),
)
def test_random_chunkings_match_reference(seed: int, n: int, cuts: list[int], origin: int) -> None:
    x = _signal(seed, n)
    mel = IncrementalLogMel(80, start=origin * HOP_LENGTH)
    _feed(mel, x, [c for c in cuts if c < n])
    ref = _reference_raw(x)
    # Before finish(): every frame whose 400-sample window is complete, i.e. all but the last
    # one when it needs the end reflect-padding (fewer than 40 samples past the last hop).
    n_inc = mel.end_frame - origin
    assert n_inc == ref.shape[1] - (1 if n % 160 < 40 else 0)
    assert mel.start_frame == origin
    np.testing.assert_allclose(mel.raw(origin, origin + n_inc), ref[:, :n_inc], atol=1e-4)
    # The normalised window equals the one-shot log_mel (the burst holds the maximum).
    np.testing.assert_allclose(mel.window(origin, origin + n_inc), log_mel(x)[:, :n_inc], atol=1e-4)
    # After finish(): every frame, exactly as the reference.
    mel.finish()
    assert mel.end_frame - origin == ref.shape[1]
    np.testing.assert_allclose(mel.window(origin, mel.end_frame), log_mel(x), atol=1e-4)


@pytest.mark.parametrize("n", [0, 1, 150, 200, 201, 359, 360, 561])
def test_short_streams(n: int) -> None:
    x = _signal(n, n)
    mel = IncrementalLogMel(80)
    mel.feed(x)
    mel.finish()
    ref = _reference_raw(x)
    assert mel.end_frame == ref.shape[1]
    np.testing.assert_allclose(mel.raw(0, mel.end_frame), ref, atol=1e-4)


def test_window_uses_its_own_maximum() -> None:
    x = _signal(1, 16_000)
    mel = IncrementalLogMel(128)
    mel.feed(x)
    raw = mel.raw(40, 90)
    assert raw.shape == (128, 50)
    np.testing.assert_allclose(mel.window(40, 90), normalize_log_mel(raw))


def test_cache_is_bounded_and_trimmed() -> None:
    mel = IncrementalLogMel(80, max_frames=3_000)
    nbytes = mel.nbytes
    chunk = _signal(2, 16_000)
    for _ in range(40):  # 40 s through a 30 s cache
        mel.feed(chunk)
    assert mel.end_frame - mel.start_frame == 3_000
    mel.trim_before(mel.end_frame - 100)
    assert mel.end_frame - mel.start_frame == 100
    assert mel.nbytes == nbytes


def test_reset_restarts_with_reflect_padding() -> None:
    x = _signal(3, 5_000)
    mel = IncrementalLogMel(80)
    mel.feed(_signal(4, 3_000))
    mel.reset(32_000)
    assert mel.sample_end == 32_000 and mel.end_frame == 200
    mel.feed(x)
    mel.finish()
    np.testing.assert_allclose(mel.raw(200, mel.end_frame), _reference_raw(x), atol=1e-4)
    with pytest.raises(RuntimeError):
        mel.feed(x)
    with pytest.raises(ValueError):
        mel.reset(100)  # not on a hop boundary
