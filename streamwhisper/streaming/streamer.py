"""The sans-I/O streaming core: samples in, events out, recognition handed out as requests.

One :class:`Streamer` per audio stream; its only clock is the number of samples fed. Audio flows
VAD -> ring buffer -> (when a request is due) incremental log-mel -> :class:`RecognitionRequest`.
The runtime's :class:`~streamwhisper.runtime.pump.Pump` drives it: :meth:`feed` as audio arrives,
:meth:`pending_request` for the request due now, :meth:`complete` (the commit policy takes the
:class:`Hypothesis`) or :meth:`abandon` when it returns, :meth:`flush` at the end until
:attr:`finished`. When a request is due is the :class:`~.cadence.Cadence`'s business.

At most one request per stream is outstanding; a new one is due once ``step_s`` of new audio arrived
in an utterance, and at once when the VAD ends the utterance (the endpoint request finalises it).
Audio outside utterances never reaches a request. A request's mel covers the audio from the commit
point to now and is normalised with the maximum of its own frames, as Whisper normalises a window.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from streamwhisper.audio.mel import HOP_LENGTH, SAMPLE_RATE
from streamwhisper.audio.vad import SpeechBoundary, SpeechDetector, Vad, WebRtcVad
from streamwhisper.events import Event, SpeechEnded, SpeechStarted
from streamwhisper.model.recognizer import Hypothesis, RecognitionRequest

from . import window as windows
from .agreement import CommitPolicy
from .cadence import Cadence
from .config import StreamingConfig
from .window import AudioWindow, align_down, align_up, carried, carry_start, checked_samples, trim_after_commit

logger = logging.getLogger(__name__)


class Streamer:
    """Streaming transcription of one audio stream, without I/O or threads.

    Args:
        config: streaming settings; defaults when omitted.
        vad: frame classifier; webrtcvad with ``config.vad`` settings when omitted.
        key: put on every request so the caller can route the hypothesis back.
    """

    def __init__(self, config: StreamingConfig | None = None, *, vad: Vad | None = None, key: object = None) -> None:
        cfg = config or StreamingConfig()
        self._config = cfg
        self._key = key
        self._audio = AudioWindow(cfg.n_mels, cfg.max_window_s)
        self._detector = SpeechDetector(vad or WebRtcVad.from_config(cfg.vad), cfg.vad)
        self._policy = CommitPolicy(cfg.policy)
        self._cadence = Cadence(cfg)
        self._pre_roll = SAMPLE_RATE * cfg.vad.pre_roll_ms // 1000
        # Quiet audio kept for the pre-roll of a start the VAD has not confirmed yet.
        self._quiet_keep = SAMPLE_RATE * (cfg.vad.pre_roll_ms + cfg.vad.start_window_ms + 2 * cfg.vad.frame_ms) // 1000
        self._active = False  # an utterance is being recognised
        self._utterance_start = 0  # its first sample
        self._endpoint_at: int | None = None  # it ended here; its endpoint request is due
        self._next_start: int | None = None  # the next utterance began before that request
        self._next_end: tuple[int, int] | None = None  # ... and ended before it (endpoint, speech end)
        self._floor = 0  # the next utterance starts after the last one
        self._speech_goes_on = False  # the utterance was ended by finalize() inside speech
        self._inflight: _Inflight | None = None
        self._flushed = self._overflowing = False
        self._heard_to = 0  # the end of its last window whose hypothesis had a word
        self._carry_due = False  # the utterance's window may reopen the words before it
        self._speech_end: int | None = None  # its last voiced sample, once the VAD ended it
        self._tail_from: int | None = None  # its endpoint request hears only the audio from here
        self._pause_final_at = -1  # where the pause that had its final began
        self._begun = 0  # utterances begun so far

    @property
    def time(self) -> float:
        """Seconds of audio fed so far."""
        return self._audio.end / SAMPLE_RATE

    @property
    def step_s(self) -> float:
        """New audio (seconds) needed before the next request; the runtime raises it under load."""
        return self._cadence.step_s

    @step_s.setter
    def step_s(self, value: float) -> None:
        self._cadence.step_s = value

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
    def superseded(self) -> bool:
        """Whether the outstanding request only delays the request due after it.

        That is the endpoint request, or a pause's (which may become the endpoint's), and the
        outstanding window ends before the speech that one would cover. The driver may drop it.
        """
        f, end, cadence = self._inflight, self._speech_end, self._cadence
        if f is None or f.endpoint:
            return False
        if self._endpoint_at is not None:
            return end is None or not cadence.reaches(f.end, end)
        detector = self._detector
        quiet, began = detector.quiet_samples, detector.last_voiced_end
        in_pause = cadence.in_pause(quiet) and not f.request.urgent and cadence.paused_at != began
        return in_pause and not cadence.reaches(f.end, began)

    @property
    def awaited(self) -> bool:
        """Whether an ended utterance's final waits for the outstanding request: the endpoint
        request, or one made before the end (a pause's) whose hypothesis will close it."""
        return self._inflight is not None and (self._inflight.endpoint or self._endpoint_at is not None)

    @property
    def utterances(self) -> tuple[int, int]:
        """(ended, closed): the utterances whose end is set (by the VAD, a finalize or the flush),
        and those whose finals all came."""
        ended = self._begun - (self._active and self._endpoint_at is None) + (self._next_end is not None)
        f = self._inflight
        return ended, self._begun - self._active - (f is not None and f.endpoint and not f.held)

    @property
    def audio(self) -> AudioWindow:
        """The ring buffer and log-mel cache (their sizes: memory stays bounded)."""
        return self._audio

    def feed(self, samples: np.ndarray) -> list[Event]:
        """Take 16 kHz mono float samples; returns the VAD events (and any utterance closed)."""
        if self._flushed:
            raise RuntimeError("feed() after flush()")
        x = checked_samples(samples)
        if self._audio.append(x) and self._active:
            if not self._overflowing:  # once per episode, not once per chunk
                logger.warning("audio ring full: uncommitted audio dropped (recognition too slow)")
            self._overflowing = True
        events = [e for boundary in self._detector.feed(x) for e in self._on_boundary(boundary)]
        if not (self._active or self._inflight):  # silence keeps the pre-roll and what may be carried
            quiet = align_down(self._audio.end - self._quiet_keep)
            self._audio.forget_before(carry_start(self._audio, self._policy, self._config, quiet))
        events.extend(self._pause_final())  # a request that heard it all came back before the hold
        events.extend(self._settle())
        return events

    def flush(self) -> list[Event]:
        """End of stream: ends speech and makes the endpoint request due.

        Keep serving :meth:`pending_request` until :attr:`finished`.
        """
        if self._flushed:
            return []
        self._flushed = True
        events = [e for boundary in self._detector.flush() for e in self._on_boundary(boundary)]
        if self._active and self._endpoint_at is None:
            self._endpoint_at = self._audio.end
        events.extend(self._settle())
        return events

    def finalize(self) -> list[Event]:
        """Force an endpoint (a client's "finalize").

        The utterance so far, or one the VAD ended and that is not closed yet, ends with an
        endpoint final answering the finalize (empty if no word was heard). Speech going on is a
        new utterance.
        """
        if self._flushed or not self._active or self._endpoint_at is not None:
            # ended by the VAD and not closed (its endpoint request may be out); not a queued one
            closing = self._active or self.awaited
            self._policy.answer_owed |= closing and not self._flushed and self._next_start is None
            return []
        self._endpoint_at, self._policy.answer_owed = max(self._audio.end, self._audio.start), True
        quiet = self._detector.quiet_samples
        if self._detector.speaking and self._cadence.in_pause(quiet):
            # in a pause: the speech ended where it began (the pause's hypothesis may have heard
            # it all); speech resuming after now is a new utterance
            self._speech_end, self._next_start = self._detector.last_voiced_end, align_down(self._audio.end)
        elif self._detector.speaking:
            # the next utterance starts a little before this point: a word cut by it is heard
            # whole there (the policy drops what repeats the committed words)
            back = round(self._config.policy.dedupe_window_s * SAMPLE_RATE)
            self._next_start = align_down(max(self._audio.end - back, self._audio.start))
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
        pause = False
        if not endpoint:
            cadence, quiet, audio = self._cadence, self._detector.quiet_samples, self._audio
            pause = cadence.pause_due(quiet, self._detector.last_voiced_end)
            if not pause and not cadence.due(audio.start, audio.end, self._utterance_start, quiet):
                return None
        if self._carry_due:  # decided now: the endpoint request before it has committed its words
            self._carry_due = False
            reopened = carry_start(self._audio, self._policy, self._config, self._audio.start)
            if reopened < self._audio.start:
                self._audio.open(reopened)
        if self._audio.catch_up():  # audio the ring dropped before it was heard (overload)
            self._policy.skip_to(self._audio.start / SAMPLE_RATE)
        self._overflowing = False
        tail = endpoint and self._tail_from is not None
        window = self._audio.mel(self._endpoint_at, finish=self._flushed, begin=self._tail_from or 0)
        if window is None:  # no complete frame yet: wait for audio
            return None
        mel, start, end = window
        prompt, prefix = (self._policy.tail_prompt(), "") if tail else self._policy.context(start / SAMPLE_RATE)
        request = RecognitionRequest(
            mel=mel,
            prompt_text=prompt,
            prefix_text=prefix,
            max_prompt_tokens=self._config.policy.max_prompt_tokens,
            language=self._config.language,
            task=self._config.task,
            key=self._key,
            start=start / SAMPLE_RATE,
            end=end / SAMPLE_RATE,
            endpoint=endpoint,
            urgent=endpoint or pause,
        )
        # (a window of the rest has no prefix to end at: it ends its utterance as it is asked, even reaching back)
        held = endpoint and not tail and carried(self._config, start, self._utterance_start, end)
        self._inflight = _Inflight(request, start, end, endpoint, endpoint and self._speech_goes_on, held, tail)
        self._cadence.last_request_end = end
        if endpoint and not held:
            self._end_utterance()
        return request

    def _pause_final(self) -> list[Event]:
        """With ``pause_final``, once per pause (``pause_hold_ms`` of quiet or more): the pending
        words as its endpoint final, when no request is out and the last one heard all the speech
        before it (the pause's own, or a regular one made inside it, back before or after the hold)."""
        if not self._config.pause_final or self._inflight:
            return []
        detector, began = self._detector, self._detector.last_voiced_end
        in_pause = self._endpoint_at is None and detector.speaking and self._cadence.in_pause(detector.quiet_samples)
        heard = self._cadence.reaches(self._cadence.last_request_end, began)
        if not in_pause or self._pause_final_at == began or not heard:
            return []
        self._cadence.paused_at = began  # (heard: the pause needs no request of its own)
        events = self._policy.commit_pending(eager=self._config.eager_pause_finals)
        if events is not None:  # (None: a doubted full stop waits for the endpoint or more speech)
            self._pause_final_at = began
        return events or []

    def complete(self, hypothesis: Hypothesis) -> list[Event]:
        """Hand back the hypothesis of the outstanding request; returns partials and finals."""
        inflight = self._inflight
        if inflight is None:
            raise RuntimeError("complete() without an outstanding request")
        self._inflight = None
        start, end = inflight.start / SAMPLE_RATE, inflight.end / SAMPLE_RATE
        prefix = inflight.request.prefix_text  # the committed words in the window, decoded after
        if inflight.tail:
            events = self._policy.close_with_tail(hypothesis, start, end, speech_goes_on=inflight.speech_goes_on)
            return events + self._settle()
        if inflight.held and self._policy.ends_at_committed(hypothesis, start, end, prefix=prefix):
            logger.debug("endpoint window at %.2f-%.2f s ended at the committed words: decoded again", start, end)
            self._audio.advance(self._utterance_start)  # still due: its request is next, uncarried
            return []
        events = self._policy.observe(
            hypothesis, start, end,
            endpoint=inflight.endpoint, prefix=prefix, speech_goes_on=inflight.speech_goes_on,
        )
        if inflight.held:
            self._end_utterance()
        heard = self._policy.heard  # (not a hypothesis that ended at the committed words: see observe)
        self._cadence.heard(bool(heard))
        if not inflight.endpoint:
            if heard:  # a hypothesis without a usable word leaves the endpoint its own request
                self._heard_to = inflight.end
            elif prefix and self._active:  # the decoder may have ended its text at its prefix
                point = windows.unheard_from(
                    self._config, self._audio, self._policy, self._utterance_start, inflight.end, not hypothesis.words
                )
                if point is not None:  # decoded afresh from there, the next window at the step
                    self._audio.advance(point)
                    self._policy.restart(self._audio.start / SAMPLE_RATE)
                    self._cadence.heard(True)  # decoded afresh: wordless hypotheses are counted anew
            events.extend(self._pause_final())
            events.extend(trim_after_commit(self._audio, self._policy, self._config, end))
        events.extend(self._settle())
        return events

    def abandon(self) -> list[Event]:
        """Forget the outstanding request without a result (the worker failed or shed it): its audio
        is covered by the next request; an abandoned endpoint request finalises the utterance from
        the previous hypothesis."""
        inflight = self._inflight
        self._inflight = None
        events: list[Event] = []
        if inflight is not None and inflight.endpoint:
            goes_on = inflight.speech_goes_on  # (its audio unheard: see CommitPolicy.close)
            events.extend(self._policy.close(inflight.end / SAMPLE_RATE, speech_goes_on=goes_on, unsaid=True))
            if inflight.held:
                self._end_utterance()
        elif inflight is not None:
            self._cadence.last_request_end = inflight.start
        events.extend(self._settle())
        return events

    def _on_boundary(self, boundary: SpeechBoundary) -> list[Event]:
        if boundary.started:
            start = align_down(boundary.sample - self._pre_roll)
            if not self._active:
                self._begin(max(start, self._audio.oldest, self._floor))
            elif self._next_start is None:  # the last utterance still waits for its endpoint
                self._next_start = start  # request: queue this one
            else:  # a third utterance before that request: it merges with the queued one
                self._next_end = None
            return [SpeechStarted(boundary.sample / SAMPLE_RATE)]
        if self._active and self._endpoint_at is not None and self._next_start is not None:
            # The queued utterance ended too before the endpoint request of the one before it
            # could be issued (a request was outstanding all along): remember its end. One
            # pending and one queued utterance at most keeps the state bounded.
            self._next_end = max(boundary.detected, self._next_start), boundary.sample
        elif self._active:
            self._next_start = None
            self._endpoint_at = max(boundary.detected, self._audio.start)
            self._speech_end = boundary.sample
        return [SpeechEnded(boundary.sample / SAMPLE_RATE)]

    def _begin(self, start: int) -> None:
        self._active = True
        self._begun += 1
        self._endpoint_at = self._next_start = self._next_end = None
        self._utterance_start = start
        self._cadence.begin(start)
        self._heard_to, self._speech_end, self._carry_due, self._tail_from = 0, None, True, None
        self._audio.open(start)

    def _end_utterance(self) -> None:
        assert self._endpoint_at is not None
        self._active = False
        self._floor = align_up(self._endpoint_at)
        if self._speech_goes_on and self._next_start is not None:
            self._floor = min(self._floor, self._next_start)
        self._speech_goes_on, self._endpoint_at = False, None
        if self._next_start is not None:
            queued = self._next_end
            self._begin(max(self._next_start, self._floor, self._audio.oldest))
            if queued is not None:
                self._endpoint_at, self._speech_end = max(queued[0], self._audio.start), queued[1]
        else:
            self._audio.idle(self._floor)

    def _settle(self) -> list[Event]:
        """Close an ended utterance without the model: when it has no audio left to recognise,
        or when the hypothesis of its pause heard it to its end (the VAD's endpoint followed);
        if those words stop a breath before the speech, its endpoint request hears only the rest."""
        if self._inflight is not None or not self._active or self._endpoint_at is None:
            return []
        # heard to the end by a pause's hypothesis, or nothing voiced (begun at a finalize in a pause)
        end, cadence = self._speech_end, self._cadence
        by_pause = bool(cadence.hold) and end is not None and cadence.reaches(self._heard_to, end)
        if by_pause and end is not None:  # ... and its words went on to about the speech's end
            by_pause, tail = windows.heard_by_pause(self._config, self._policy, end)
            if tail is not None:
                self._tail_from = max(align_down(round(tail * SAMPLE_RATE)), self._audio.start)
                return []  # its endpoint request hears only the rest (pending_request)
        heard = end is not None and end <= self._utterance_start or by_pause
        if not heard and self._endpoint_at // HOP_LENGTH > max(self._audio.start, self._utterance_start) // HOP_LENGTH:
            return []
        endpoint = self._endpoint_at / SAMPLE_RATE
        events = self._policy.close(endpoint, speech_goes_on=self._speech_goes_on, unsaid=by_pause)
        self._end_utterance()
        return events


@dataclass(frozen=True, slots=True)
class _Inflight:
    request: RecognitionRequest
    start: int  # samples, hop-aligned
    end: int
    endpoint: bool
    speech_goes_on: bool = False  # a forced endpoint inside speech (see finalize)
    # A carried endpoint window: its utterance stays open until the hypothesis is back; if the
    # decoder ended its text at the carried words, the endpoint is decoded again from the utterance.
    held: bool = False
    tail: bool = False  # it hears only the audio after the pending words (see tail_unheard_s)
