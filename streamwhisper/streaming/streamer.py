"""The sans-I/O streaming core: samples in, events out, recognition handed out as requests.

One :class:`Streamer` per audio stream. Its only clock is the number of samples fed. Audio flows
VAD -> ring buffer -> (when a request is due) incremental log-mel -> :class:`RecognitionRequest`;
the caller runs the recogniser (batched across streams, on its own thread) and hands each
:class:`Hypothesis` back to :meth:`Streamer.complete`, which runs the commit policy.

The runtime's :class:`~streamwhisper.runtime.pump.Pump` drives it: :meth:`feed` as audio
arrives, :meth:`pending_request` for the request due now (it carries its window and whether it
is an endpoint), :meth:`complete` or :meth:`abandon` when that request returns, :meth:`flush` at
the end of the stream until :attr:`finished`.

At most one request per stream is outstanding; a new one is due once ``step_s`` of new audio
arrived in an utterance, and at once when the VAD ends the utterance (the endpoint request
finalises it). Audio outside utterances never reaches a request. A request's mel covers the
audio from the commit point to now and is normalised with the maximum of its own frames, as
Whisper normalises a window cut from a file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from streamwhisper.audio.mel import HOP_LENGTH, N_FRAMES, SAMPLE_RATE, IncrementalLogMel
from streamwhisper.audio.ring import RingBuffer
from streamwhisper.audio.vad import SpeechBoundary, SpeechDetector, Vad, WebRtcVad
from streamwhisper.errors import AudioFormatError
from streamwhisper.events import Event, Final, SpeechEnded, SpeechStarted
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest

from .agreement import WINDOW_SLACK_S, CommitPolicy
from .config import StreamingConfig

logger = logging.getLogger(__name__)


def _align_down(sample: int) -> int:
    return sample - sample % HOP_LENGTH


def _align_up(sample: int) -> int:
    return -(-sample // HOP_LENGTH) * HOP_LENGTH


class Streamer:
    """Streaming transcription of one audio stream, without I/O or threads.

    Args:
        config: streaming settings; defaults when omitted.
        vad: frame classifier; webrtcvad with ``config.vad`` settings when omitted.
        key: put on every request so the caller can route the hypothesis back.
    """

    def __init__(
        self,
        config: StreamingConfig | None = None,
        *,
        vad: Vad | None = None,
        key: object = None,
    ) -> None:
        cfg = config or StreamingConfig()
        self._config = cfg
        self._key = key
        capacity = int(cfg.max_window_s * SAMPLE_RATE)
        self._ring = RingBuffer(capacity)
        self._mel = IncrementalLogMel(cfg.n_mels, max_frames=capacity // HOP_LENGTH + 1)
        self._detector = SpeechDetector(vad or WebRtcVad(cfg.vad.aggressiveness, cfg.vad.frame_ms), cfg.vad)
        self._policy = CommitPolicy(cfg.policy)
        self._step = cfg.min_step_s
        self._pre_roll = SAMPLE_RATE * cfg.vad.pre_roll_ms // 1000
        # Quiet audio kept for the pre-roll of a start the VAD has not confirmed yet.
        self._quiet_keep = SAMPLE_RATE * (cfg.vad.pre_roll_ms + cfg.vad.start_window_ms + 2 * cfg.vad.frame_ms) // 1000
        self._active = False  # an utterance is being recognised
        self._window_start = 0  # its first uncommitted sample (hop-aligned)
        self._utterance_start = 0  # its first sample
        self._endpoint_at: int | None = None  # it ended here; its endpoint request is due
        self._next_start: int | None = None  # the next utterance began before that request
        self._next_end: int | None = None  # ... and ended before it, too
        self._floor = 0  # the next utterance starts after the last one
        self._speech_goes_on = False  # the utterance was ended by finalize() inside speech
        self._last_request_end = 0
        self._inflight: _Inflight | None = None
        self._flushed = False
        self._overflowing = False
        self._wordless = 0  # hypotheses in a row, in this utterance, that had no word

    @property
    def time(self) -> float:
        """Seconds of audio fed so far."""
        return self._ring.end / SAMPLE_RATE

    @property
    def step_s(self) -> float:
        """New audio (seconds) needed before the next request; the runtime raises it under load."""
        return self._step

    @step_s.setter
    def step_s(self, value: float) -> None:
        # A request is due within a step after the window passed force_commit_s, so a step of
        # at most max_window_s - force_commit_s keeps every window inside the ring.
        low, high = self._config.min_step_s, self._config.max_window_s - self._config.force_commit_s
        if not low <= value <= high:
            raise ValueError(f"step must be in [{low}, {high}] s, got {value}")
        self._step = value

    @property
    def speaking(self) -> bool:
        """True while the VAD is in its speaking state."""
        return self._detector.speaking

    @property
    def outstanding(self) -> RecognitionRequest | None:
        """The request handed out and not yet completed, if any."""
        return None if self._inflight is None else self._inflight.request

    @property
    def finished(self) -> bool:
        """True after :meth:`flush` once every request has been completed."""
        return self._flushed and not self._active and self._inflight is None

    @property
    def buffered_samples(self) -> int:
        """Samples held in the ring buffer (at most ``max_window_s`` worth)."""
        return len(self._ring)

    @property
    def cached_frames(self) -> int:
        """Log-mel frames held in the cache."""
        return self._mel.end_frame - self._mel.start_frame

    @property
    def nbytes(self) -> int:
        """Preallocated bytes of the audio ring and mel cache (constant for a session)."""
        return self._ring.nbytes + self._mel.nbytes

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Take 16 kHz mono float samples; returns the VAD events (and any utterance closed)."""
        if self._flushed:
            raise RuntimeError("feed() after flush()")
        x = np.asarray(samples)
        if x.ndim != 1 or not np.issubdtype(x.dtype, np.floating):
            raise AudioFormatError(f"expected 1-D float samples, got {x.dtype} of shape {x.shape}")
        if not np.isfinite(x).all():
            raise AudioFormatError("samples contain NaN or infinity")
        x = x.astype(np.float32, copy=False)
        if self._ring.append(x) and self._active and self._ring.start > self._window_start:
            if not self._overflowing:  # once per episode, not once per chunk
                logger.warning("audio ring full: uncommitted audio dropped (recognition too slow)")
            self._overflowing = True
        events: list[Event] = []
        for boundary in self._detector.feed(x):
            events.extend(self._on_boundary(boundary))
        if not self._active:  # hours of silence keep only the pre-roll
            self._ring.trim_before(self._ring.end - self._quiet_keep)
        events.extend(self._settle())
        return events

    def flush(self) -> list[Event]:
        """End of stream: ends speech and makes the endpoint request due.

        Keep serving :meth:`pending_request` until :attr:`finished`.
        """
        if self._flushed:
            return []
        self._flushed = True
        events: list[Event] = []
        for boundary in self._detector.flush():
            events.extend(self._on_boundary(boundary))
        if self._active and self._endpoint_at is None:
            self._endpoint_at = self._ring.end
        events.extend(self._settle())
        return events

    def finalize(self) -> list[Event]:
        """Force an endpoint now (a client's "finalize"): the utterance so far becomes final.

        Speech that goes on after this point is recognised as a new utterance.
        """
        if self._flushed or not self._active or self._endpoint_at is not None:
            return []
        self._endpoint_at = max(self._ring.end, self._window_start)
        if self._detector.speaking:
            # the next utterance starts a little before this point: a word cut by it is heard
            # whole there (the policy drops what repeats the committed words)
            back = round(self._config.policy.dedupe_window_s * SAMPLE_RATE)
            self._next_start = _align_down(max(self._ring.end - back, self._window_start))
            self._speech_goes_on = True
        return self._settle()

    def pending_request(self) -> RecognitionRequest | None:
        """The request to run now, or None; it stays outstanding until :meth:`complete`.

        Due when no request is outstanding, an utterance is active, and either ``step_s`` of
        new audio arrived since the last request or the utterance ended. The window holds the
        audio since the commit point (at most ``max_window_s``) as normalised log-mel.
        """
        if self._inflight is not None or not self._active:
            return None
        endpoint = self._endpoint_at is not None
        if not endpoint and not self._due():
            return None
        self._catch_up()
        self._sync_mel()
        start = max(self._window_start // HOP_LENGTH, self._mel.start_frame)
        end = self._mel.end_frame
        if self._endpoint_at is not None:
            end = min(end, self._endpoint_at // HOP_LENGTH)
        start = max(start, end - N_FRAMES)
        if end <= start:  # no complete frame yet: wait for audio
            return None
        prompt, prefix = self._policy.context(start * HOP_LENGTH / SAMPLE_RATE)
        request = RecognitionRequest(
            mel=self._mel.window(start, end),
            prompt_text=prompt,
            prefix_text=prefix,
            max_prompt_tokens=self._config.policy.max_prompt_tokens,
            language=self._config.language,
            task=self._config.task,
            key=self._key,
            start=start * HOP_LENGTH / SAMPLE_RATE,
            end=end * HOP_LENGTH / SAMPLE_RATE,
            endpoint=endpoint,
        )
        self._inflight = _Inflight(
            request, start * HOP_LENGTH, end * HOP_LENGTH, endpoint, bool(prefix), endpoint and self._speech_goes_on
        )
        self._last_request_end = end * HOP_LENGTH
        if endpoint:
            self._end_utterance()
        return request

    def _due(self) -> bool:
        """Whether a regular (not endpoint) request is due: enough new audio since the last."""
        cfg = self._config
        if cfg.pause_hold_ms and self._detector.quiet_samples >= cfg.pause_hold_ms * SAMPLE_RATE // 1000:
            return False  # a pause: the next request comes when speech resumes, or at the endpoint
        new_audio = self._ring.end - max(self._last_request_end, self._window_start)
        step = self._step
        heard = (self._last_request_end - self._utterance_start) / SAMPLE_RATE
        if heard == 0:  # the utterance's first request (at 1.5 s, the one the first commit agrees with)
            step = max(step, cfg.first_step_s)
        elif heard + step + WINDOW_SLACK_S < cfg.policy.min_commit_window_s:
            step = max(step, cfg.early_step_s)  # the next hypothesis could only be a partial
        if self._wordless >= cfg.wordless_after:
            step = max(step, cfg.wordless_step_s)
        return new_audio >= step * SAMPLE_RATE

    def complete(self, hypothesis: Hypothesis) -> list[Event]:
        """Hand back the hypothesis of the outstanding request; returns partials and finals."""
        inflight = self._inflight
        if inflight is None:
            raise RuntimeError("complete() without an outstanding request")
        self._inflight = None
        start, end = inflight.start / SAMPLE_RATE, inflight.end / SAMPLE_RATE
        events = self._policy.observe(
            hypothesis, start, end,
            endpoint=inflight.endpoint, prefixed=inflight.prefixed, speech_goes_on=inflight.speech_goes_on,
        )
        heard = bool(self._policy.pending) or any(isinstance(e, Final) and e.words for e in events)
        self._wordless = 0 if heard else self._wordless + 1
        if not inflight.endpoint:
            events.extend(self._after_commit(end))
        events.extend(self._settle())
        return events

    def abandon(self) -> list[Event]:
        """Forget the outstanding request without a result (the worker failed or shed it).

        Its audio is covered by the next request; an abandoned endpoint request finalises the
        utterance from the previous hypothesis.
        """
        inflight = self._inflight
        self._inflight = None
        events: list[Event] = []
        if inflight is not None and inflight.endpoint:
            events.extend(self._policy.close(inflight.end / SAMPLE_RATE, speech_goes_on=inflight.speech_goes_on))
        elif inflight is not None:
            self._last_request_end = inflight.start
        events.extend(self._settle())
        return events

    def _on_boundary(self, boundary: SpeechBoundary) -> list[Event]:
        if boundary.started:
            start = _align_down(boundary.sample - self._pre_roll)
            if not self._active:
                self._begin(max(start, _align_up(self._ring.start), self._floor))
            elif self._next_start is None:  # the last utterance still waits for its endpoint
                self._next_start = start  # request: queue this one
            else:  # a third utterance before that request: it merges with the queued one
                self._next_end = None
            return [SpeechStarted(boundary.sample / SAMPLE_RATE)]
        if self._active and self._endpoint_at is not None and self._next_start is not None:
            # The queued utterance ended too before the endpoint request of the one before it
            # could be issued (a request was outstanding all along): remember its end. One
            # pending and one queued utterance at most keeps the state bounded.
            self._next_end = max(boundary.detected, self._next_start)
        elif self._active:
            self._next_start = None
            self._endpoint_at = max(boundary.detected, self._window_start)
        return [SpeechEnded(boundary.sample / SAMPLE_RATE)]

    def _begin(self, start: int) -> None:
        self._active = True
        self._endpoint_at = self._next_start = self._next_end = None
        self._window_start = self._last_request_end = self._utterance_start = start
        self._wordless = 0
        self._mel.reset(start)

    def _end_utterance(self) -> None:
        assert self._endpoint_at is not None
        self._active = False
        self._floor = _align_up(self._endpoint_at)
        if self._speech_goes_on and self._next_start is not None:
            self._floor = min(self._floor, self._next_start)
        self._speech_goes_on = False
        self._endpoint_at = None
        if self._next_start is not None:
            queued_end = self._next_end
            self._begin(max(self._next_start, self._floor, _align_up(self._ring.start)))
            if queued_end is not None:
                self._endpoint_at = max(queued_end, self._window_start)
        else:
            self._mel.reset(self._floor)  # empties the cache until the next utterance

    def _settle(self) -> list[Event]:
        """Close an ended utterance that has no audio left to recognise, without the model."""
        if self._inflight is not None or not self._active or self._endpoint_at is None:
            return []
        if self._endpoint_at // HOP_LENGTH > self._window_start // HOP_LENGTH:
            return []
        events = self._policy.close(self._endpoint_at / SAMPLE_RATE, speech_goes_on=self._speech_goes_on)
        self._end_utterance()
        return events

    def _after_commit(self, window_end: float) -> list[Event]:
        """Trim at the commit point; force a commit when the uncommitted audio grows too long."""
        events: list[Event] = []
        self._trim_to_commit()
        limit = self._config.force_commit_s * SAMPLE_RATE
        if self._ring.end - self._window_start > limit:
            cut = window_end - self._config.force_keep_s
            events.extend(self._policy.force_commit(cut))
            self._trim_to_commit(force=True)
            if self._ring.end - self._window_start > limit:  # nothing heard there: skip it
                pending = self._policy.pending
                self._policy.skip_to(min(cut, pending[0].start) if pending else cut)
                self._trim_to_commit(force=True)
        return events

    def _trim_to_commit(self, force: bool = False) -> None:
        """Move the window start towards the commit point once the window is long enough.

        Shorter windows keep their committed words, decoded as a forced prefix: no word is cut
        at a commit point inside speech, at the price of re-encoding that audio. A trimmed window
        keeps the committed words of its last ``trim_keep_s`` seconds; a forced trim (the window
        limit) cuts at the commit point itself.
        """
        cfg = self._config
        commit = _align_down(round(self._policy.trim_point(0.0 if force else cfg.trim_keep_s) * SAMPLE_RATE))
        if not force and self._ring.end - self._window_start <= cfg.trim_after_s * SAMPLE_RATE:
            return
        if commit > self._window_start:
            self._window_start = min(commit, _align_down(self._ring.end))
            self._ring.trim_before(self._window_start)
            self._mel.trim_before(self._window_start // HOP_LENGTH)

    def _catch_up(self) -> None:
        """Skip audio the ring dropped before it was recognised (only under overload)."""
        first = _align_up(self._ring.start)
        if self._window_start < first:
            self._policy.skip_to(first / SAMPLE_RATE)
            self._window_start = first
        self._overflowing = False

    def _sync_mel(self) -> None:
        if self._mel.finished:
            return
        begin = self._mel.sample_end
        if begin < self._ring.start:  # the mel missed audio that is gone: restart it
            self._mel.reset(self._window_start)
            begin = self._window_start
        if self._ring.end > begin:
            self._mel.feed(self._ring.read(begin, self._ring.end))
        if self._flushed:
            self._mel.finish()


@dataclass(frozen=True, slots=True)
class _Inflight:
    request: RecognitionRequest
    start: int  # samples, hop-aligned
    end: int
    endpoint: bool
    prefixed: bool = False  # decoded after the committed words in its window
    speech_goes_on: bool = False  # a forced endpoint inside speech (see finalize)
