"""The audio a streaming client may have to send again: a bounded byte buffer indexed by sample frame.

:class:`~streamwhisper.client.StreamClient` keeps here the audio it sent that no final covers
yet, and the audio it could not send while its connection was down. After a resume it sends
again from the frame the server says it holds; after a new session, from the end of the last
final. The buffer holds at most ``max_s`` seconds: past that the oldest audio is dropped (with
one warning per episode, as the microphone's buffer does), and counted in :attr:`dropped_s`.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class AudioBacklog:
    """Frames ``start`` .. ``end`` of a stream (frames counted from its first), as bytes.

    Args:
        frame_bytes: bytes per sample frame (sample size x channels).
        sample_rate: frames per second.
        max_s: the most audio held, in seconds.
    """

    def __init__(self, frame_bytes: int, sample_rate: int, max_s: float) -> None:
        self.frame_bytes, self.sample_rate = frame_bytes, sample_rate
        self._limit = max(int(max_s * sample_rate), 1) * frame_bytes
        self._data = bytearray()
        self.start = 0  # the frame of the first byte held
        self.dropped_s = 0.0  # audio dropped at the bound, in seconds
        self._dropping = False

    @property
    def end(self) -> int:
        """The frame after the last one held (all the audio given so far)."""
        return self.start + len(self._data) // self.frame_bytes

    def append(self, data: bytes) -> None:
        self._data += data
        over = len(self._data) - self._limit
        if over > 0:
            over += -over % self.frame_bytes
            del self._data[:over]
            self.start += over // self.frame_bytes
            self.dropped_s += over / self.frame_bytes / self.sample_rate
            if not self._dropping:
                logger.warning("the unsent audio passed its bound (%.0f s): dropping the oldest", self.max_s)
            self._dropping = True

    @property
    def max_s(self) -> float:
        return self._limit / self.frame_bytes / self.sample_rate

    def release(self, frame: int) -> None:
        """Forget the audio before ``frame`` (a final covers it)."""
        n = min(max(frame - self.start, 0), len(self._data) // self.frame_bytes)
        if n:
            del self._data[: n * self.frame_bytes]
            self.start += n
            self._dropping = False

    def since(self, frame: int) -> bytes:
        """The audio from ``frame`` on (from :attr:`start` when ``frame`` was dropped)."""
        offset = max(frame - self.start, 0) * self.frame_bytes
        return bytes(self._data[offset:])
