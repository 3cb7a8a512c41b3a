"""The audio of one stream that the model may still hear: samples, and their log-mel from the
window start on.

A :class:`AudioWindow` holds at most ``seconds`` of audio in a ring buffer. Its ``start`` (a
hop-aligned sample) is where the next request's window begins; the log-mel of the audio from
there is computed incrementally, once per sample, and cut into request windows of at most
30 s. All positions are samples on the stream's clock. :func:`trim_after_commit` moves the
window start as the commit policy commits words.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from streamwhisper.audio.mel import HOP_LENGTH, N_FRAMES, SAMPLE_RATE, IncrementalLogMel
from streamwhisper.audio.ring import RingBuffer
from streamwhisper.errors import AudioFormatError
from streamwhisper.events import Event

from .agreement import CommitPolicy
from .config import StreamingConfig

logger = logging.getLogger(__name__)
# A window of the rest after a pause's words (tail_unheard_s) starts this long before their end:
# a word's aligned end may come early, and that word heard again is dropped.
TAIL_BACK_S = 0.1


def trim_after_commit(audio: AudioWindow, policy: CommitPolicy, cfg: StreamingConfig, window_end: float) -> list[Event]:
    """After a hypothesis: trim the window at the commit point; force a commit when the
    uncommitted audio grows past ``force_commit_s`` (and skip it if nothing was heard there)."""
    events: list[Event] = []
    _trim_to_commit(audio, policy, cfg)
    limit = cfg.force_commit_s * SAMPLE_RATE
    if audio.end - audio.start > limit:
        cut = window_end - cfg.force_keep_s
        events.extend(policy.force_commit(cut))
        _trim_to_commit(audio, policy, cfg, force=True)
        if audio.end - audio.start > limit:  # nothing heard there: skip it
            pending = policy.pending
            policy.skip_to(min(cut, pending[0].start) if pending else cut)
            _trim_to_commit(audio, policy, cfg, force=True)
    return events


def _trim_to_commit(audio: AudioWindow, policy: CommitPolicy, cfg: StreamingConfig, force: bool = False) -> None:
    """Move the window start towards the commit point once the window is long enough.

    Shorter windows keep their committed words, decoded as a forced prefix: no word is cut
    at a commit point inside speech, at the price of re-encoding that audio. A trimmed window
    keeps the committed words of its last ``trim_keep_s`` seconds; a forced trim (the window
    limit) cuts at the commit point itself.
    """
    commit = align_down(round(policy.trim_point(0.0 if force else cfg.trim_keep_s) * SAMPLE_RATE))
    if force or audio.end - audio.start > cfg.trim_after_s * SAMPLE_RATE:
        audio.advance(commit)


def heard_by_pause(cfg: StreamingConfig, policy: CommitPolicy, speech_end: int) -> tuple[bool, float | None]:
    """Whether the words of a pause's hypothesis, which heard the speech to its end at
    ``speech_end``, went on to about that end (``pause_unheard_s``); and, when they stop more
    than ``tail_unheard_s`` before it, where the window of only the rest starts (seconds), else None."""
    pending = policy.pending
    said_to = pending[-1].end if pending else policy.last_word_end
    gap = speech_end / SAMPLE_RATE - said_to if said_to is not None else math.inf
    if gap > cfg.pause_unheard_s:
        logger.debug(
            "the pause's words end at %s s, its speech at %.2f s: to the endpoint", said_to, speech_end / SAMPLE_RATE
        )
        return False, None
    return True, said_to - TAIL_BACK_S if said_to is not None and gap > cfg.tail_unheard_s > 0 else None


def carry_start(audio: AudioWindow, policy: CommitPolicy, cfg: StreamingConfig, start: int) -> int:
    """Where the window of an utterance starting at ``start`` opens (see ``carry_gap_s``)."""
    point = policy.reopen_point(start / SAMPLE_RATE, cfg.carry_gap_s, cfg.carry_keep_s)
    return min(start, max(align_down(round(point * SAMPLE_RATE)), audio.oldest))


def carried(cfg: StreamingConfig, start: int, own: int, end: int) -> bool:
    """Whether a window from ``start`` to ``end`` was carried (it opens before its utterance's
    own audio at ``own``) and holds ``uncarry_after_s`` of that audio (see ``uncarry_after_s``)."""
    after = round(cfg.uncarry_after_s * SAMPLE_RATE)
    return bool(after) and start < own <= end - after


def unheard_from(
    cfg: StreamingConfig, audio: AudioWindow, policy: CommitPolicy, own: int, end: int, said_nothing: bool
) -> int | None:
    """Where an utterance's windows start once a window to ``end``, decoded after the committed
    words it holds (its forced prefix), heard nothing new; None: where they do now.

    A carried window (:func:`carried`) gives way to the utterance's own audio at ``own``. A window
    inside the utterance whose decoder said nothing at all after its prefix (``said_nothing``: not
    words screened out as doubtful, which the next window may hear better), with
    ``uncarry_after_s`` of audio after the commit point, starts there, the committed words its
    prompt: the decoder took the prefix for the whole window (Apollo 11's radio in ``hard``: "See
    you later. bye bye" committed, then 8 s of speech unheard to the endpoint)."""
    if carried(cfg, audio.start, own, end):
        return own
    commit = align_down(round(policy.committed_end * SAMPLE_RATE))
    return commit if said_nothing and carried(cfg, audio.start, commit, end) else None


def align_down(sample: int) -> int:
    return sample - sample % HOP_LENGTH


def align_up(sample: int) -> int:
    return -(-sample // HOP_LENGTH) * HOP_LENGTH


class AudioWindow:
    """Ring buffer and incremental log-mel of one stream, from the window start to now."""

    def __init__(self, n_mels: int, seconds: float) -> None:
        capacity = int(seconds * SAMPLE_RATE)
        self._ring = RingBuffer(capacity)
        self._mel = IncrementalLogMel(n_mels, max_frames=capacity // HOP_LENGTH + 1)
        self.start = 0  # the window's first sample (hop-aligned)

    @property
    def end(self) -> int:
        """Samples fed so far."""
        return self._ring.end

    @property
    def oldest(self) -> int:
        """The first hop-aligned sample the ring still holds."""
        return align_up(self._ring.start)

    @property
    def buffered_samples(self) -> int:
        return len(self._ring)

    @property
    def cached_frames(self) -> int:
        return self._mel.end_frame - self._mel.start_frame

    @property
    def nbytes(self) -> int:
        """Preallocated bytes of the ring and mel cache (constant)."""
        return self._ring.nbytes + self._mel.nbytes

    def append(self, samples: np.ndarray) -> bool:
        """Add samples; True when the ring dropped audio after the window start."""
        return self._ring.append(samples) > 0 and self._ring.start > self.start

    def open(self, start: int) -> None:
        """Start the window at ``start`` (an utterance begins, or reopens earlier audio)."""
        self.start = start
        self._mel.reset(start)

    def idle(self, sample: int) -> None:
        """No utterance: empty the mel cache; the next one starts at ``sample`` or later."""
        self._mel.reset(sample)

    def forget_before(self, sample: int) -> None:
        """Drop the audio before ``sample`` (between utterances)."""
        self._ring.trim_before(sample)

    def advance(self, sample: int) -> None:
        """Move the window start forward to ``sample`` (at most now), dropping what is before."""
        if sample > self.start:
            self.start = min(sample, align_down(self._ring.end))
            self._ring.trim_before(self.start)
            self._mel.trim_before(self.start // HOP_LENGTH)

    def catch_up(self) -> bool:
        """Skip the audio the ring dropped before it was recognised; True when it did."""
        if self.start >= self.oldest:
            return False
        self.start = self.oldest
        return True

    def mel(
        self, end: int | None = None, *, finish: bool = False, begin: int = 0
    ) -> tuple[np.ndarray, int, int] | None:
        """The normalised log-mel of the window (from ``begin`` if later) up to now (or ``end``),
        at most 30 s: (mel, first sample, end sample), hop-aligned; None while it holds no
        complete frame. ``finish``: the stream ended, so the last partial frame is padded and computed."""
        self._sync(finish)
        first = max(self.start // HOP_LENGTH, self._mel.start_frame, begin // HOP_LENGTH)
        last = self._mel.end_frame if end is None else min(self._mel.end_frame, end // HOP_LENGTH)
        first = max(first, last - N_FRAMES)
        if last <= first:
            return None
        return self._mel.window(first, last), first * HOP_LENGTH, last * HOP_LENGTH

    def _sync(self, finish: bool) -> None:
        if self._mel.finished:
            return
        begin = self._mel.sample_end
        if begin < self._ring.start:  # the mel missed audio that is gone: restart it
            self._mel.reset(self.start)
            begin = self.start
        if self._ring.end > begin:
            self._mel.feed(self._ring.read(begin, self._ring.end))
        if finish:
            self._mel.finish()


def checked_samples(samples: np.ndarray) -> np.ndarray:
    """``samples`` as 1-D float32; AudioFormatError for other shapes, non-float or non-finite data."""
    x = np.asarray(samples)
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.floating):
        raise AudioFormatError(f"expected 1-D float samples, got {x.dtype} of shape {x.shape}")
    if not np.isfinite(x).all():
        raise AudioFormatError("samples contain NaN or infinity")
    return x.astype(np.float32, copy=False)
