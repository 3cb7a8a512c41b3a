"""When a stream's next recognition request is due: the cadence of one utterance's requests.

Pure bookkeeping in samples, owned by the :class:`~streamwhisper.streaming.streamer.Streamer`,
which tells it what the VAD hears and what each request covered. A request is due once
:attr:`Cadence.step_s` of new audio arrived (longer steps for an utterance's first windows and
after hypotheses without a word), or once per pause, when the VAD has heard ``pause_hold_ms`` of
quiet and no window reached into it yet.
"""

from __future__ import annotations

from streamwhisper.audio.mel import SAMPLE_RATE

from .agreement import WINDOW_SLACK_S
from .config import StreamingConfig


class Cadence:
    """The request schedule of one stream: its steps from ``config`` (seconds), the audio clock in samples."""

    def __init__(self, config: StreamingConfig) -> None:
        self._config = config
        self._step = config.min_step_s
        self.hold = SAMPLE_RATE * config.pause_hold_ms // 1000  # quiet that makes a pause (0: none)
        self.last_request_end = 0  # where the last request's window ended
        self.paused_at = -1  # where the pause that had its request (or needed none) began
        self._wordless = 0  # hypotheses in a row without a word

    @property
    def step_s(self) -> float:
        """New audio (seconds) needed before the next request; the runtime raises it under load."""
        return self._step

    @step_s.setter
    def step_s(self, value: float) -> None:
        # A step of at most max_window_s - force_commit_s keeps every window in the ring: one is
        # due a step past force_commit_s.
        low, high = self._config.min_step_s, self._config.max_window_s - self._config.force_commit_s
        if not low <= value <= high:
            raise ValueError(f"step must be in [{low}, {high}] s, got {value}")
        self._step = value

    def begin(self, start: int) -> None:
        """An utterance begins at sample ``start``: its first request waits for its first step."""
        self.last_request_end = start
        self._wordless = 0

    def heard(self, words: bool) -> None:
        """A hypothesis came back, with a usable word or not (wordless ones space requests out)."""
        self._wordless = 0 if words else self._wordless + 1

    def in_pause(self, quiet: int) -> bool:
        """Whether ``quiet`` samples since the last voiced one make a pause."""
        return bool(self.hold) and quiet >= self.hold

    def reaches(self, sample: int, voiced_end: int) -> bool:
        """Whether a window ending at ``sample`` reached into the pause after ``voiced_end`` (by
        half its hold): its hypothesis heard all the speech before the pause."""
        return sample >= voiced_end + self.hold // 2

    def pause_due(self, quiet: int, voiced_end: int) -> bool:
        """Whether the request of a pause is due: ``pause_hold_ms`` of quiet after ``voiced_end``
        and no window reached that far yet (once per pause). Its hypothesis ends the utterance if
        the VAD does."""
        if not self.in_pause(quiet) or self.paused_at == voiced_end:
            return False  # no pause, or its request was made
        self.paused_at = voiced_end
        return not self.reaches(self.last_request_end, voiced_end)

    def due(self, audio_start: int, audio_end: int, utterance_start: int, quiet: int) -> bool:
        """Whether a regular request is due: enough new audio since the last, and no pause."""
        cfg = self._config
        if self.in_pause(quiet):
            return False  # a pause: the next request comes when speech resumes, or at the endpoint
        new_audio = audio_end - max(self.last_request_end, audio_start)
        step = self._step
        heard = (self.last_request_end - utterance_start) / SAMPLE_RATE
        if heard == 0:  # the utterance's first request (at 1.5 s, the one the first commit agrees with)
            step = max(step, cfg.first_step_s)
        elif heard + step + WINDOW_SLACK_S < cfg.policy.min_commit_window_s:
            step = max(step, cfg.early_step_s)  # the next hypothesis could only be a partial
        if self._wordless >= cfg.wordless_after:
            step = max(step, cfg.wordless_step_s)
        return new_audio >= step * SAMPLE_RATE
