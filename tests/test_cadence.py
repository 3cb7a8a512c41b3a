"""Tests for streamwhisper.streaming.cadence: when an utterance's next request is due."""

from __future__ import annotations

import pytest

from streamwhisper.audio.mel import SAMPLE_RATE
from streamwhisper.streaming.cadence import Cadence
from streamwhisper.streaming.config import StreamingConfig

START = 10 * SAMPLE_RATE  # the utterance begins 10 s into the stream


def _samples(seconds: float) -> int:
    return round(seconds * SAMPLE_RATE)


def _first_due_after(cadence: Cadence, begun_at: int, quiet: int = 0) -> float:
    """Seconds of audio after the last request's end at which the next request is first due."""
    end = cadence.last_request_end
    while not cadence.due(begun_at, end, begun_at, quiet):
        end += SAMPLE_RATE // 100
    return (end - cadence.last_request_end) / SAMPLE_RATE


def test_windows_grow_1_5_2_0_2_5_s_then_every_step() -> None:
    cadence = Cadence(StreamingConfig())  # first_step_s 1.5, early_step_s 1.0, min_step_s 0.5
    cadence.begin(START)
    gaps = []
    for _ in range(4):
        gap = _first_due_after(cadence, START)
        gaps.append(gap)
        cadence.last_request_end += _samples(gap)
    assert gaps == [1.5, 0.5, 0.5, 0.5]  # 1.5 s, then 2.0 s: a commit is possible from there


def test_wordless_hypotheses_space_the_requests_out_until_one_has_words() -> None:
    config = StreamingConfig()
    cadence = Cadence(config)
    cadence.begin(START)
    cadence.last_request_end = START + _samples(3.0)  # past the utterance's first windows
    for _ in range(config.wordless_after):
        cadence.heard(False)
    assert _first_due_after(cadence, START) == config.wordless_step_s
    cadence.heard(True)
    assert _first_due_after(cadence, START) == config.min_step_s


def test_a_pause_has_one_request_unless_a_window_reached_into_it() -> None:
    cadence = Cadence(StreamingConfig(pause_hold_ms=150))
    cadence.begin(START)
    voiced_end = START + _samples(2.0)
    cadence.last_request_end = voiced_end - _samples(0.3)
    hold = cadence.hold
    assert not cadence.pause_due(hold - 1, voiced_end)  # not a pause yet
    assert not cadence.due(START, voiced_end + hold, START, hold)  # no regular request in a pause
    assert cadence.pause_due(hold, voiced_end)
    assert not cadence.pause_due(hold + 800, voiced_end)  # once per pause
    # the next pause: a window already reached half the hold into it, so it needs none
    voiced_end += _samples(3.0)
    cadence.last_request_end = voiced_end + hold // 2
    assert cadence.reaches(cadence.last_request_end, voiced_end) and not cadence.pause_due(hold, voiced_end)


def test_no_pause_request_without_a_pause_hold() -> None:
    cadence = Cadence(StreamingConfig(pause_hold_ms=0))
    cadence.begin(START)
    assert not cadence.in_pause(SAMPLE_RATE) and not cadence.pause_due(SAMPLE_RATE, START)


@pytest.mark.parametrize("step", [0.4, 10.5])  # below min_step_s; a window that could outgrow the ring
def test_a_step_out_of_range_is_refused(step: float) -> None:
    cadence = Cadence(StreamingConfig())
    with pytest.raises(ValueError, match="step must be in"):
        cadence.step_s = step
    cadence.step_s = 2.0
    assert cadence.step_s == 2.0
