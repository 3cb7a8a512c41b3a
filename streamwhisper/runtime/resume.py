"""Session resume: the finals a session keeps for replay, and the sessions a client may resume.

A native session (``/v1/stream``) outlives its connection. When the connection is lost (no close
frame: a reset, a missed keepalive, a client that stopped reading), the session goes on
recognising the audio it received and keeps its finals in its :class:`ReplayBuffer`; its client
reconnects within ``resume_grace_s`` with ``?resume=<token>&last_seq=<n>`` (the token came in
``ready``) and gets every final after ``n``, then the session goes on as before. Past the grace
period the session is finalised and dropped. :class:`Resumes` maps tokens to the sessions that
may be resumed: every live session of a resumable dialect, attached or not, so that a client
whose old connection the server still believes alive (half-open TCP) takes it over.

Both are bounded: the replay buffer by ``max_replay`` finals, the registry by the sessions open
(a detached session still counts against ``max_sessions``: it still holds audio and a stream).
"""

from __future__ import annotations

import secrets
from collections import deque
from typing import Protocol

from .dialects import Dialect, SessionInfo


class ResumableDialect(Dialect, Protocol):
    """A dialect whose sessions can be resumed (the native one)."""

    def resumed(self, session: SessionInfo, frames: int) -> str | None:
        """The first message on a resumed connection: the session, and the sample frames of
        the client's audio the server holds (the client sends on from there)."""
        ...


class ReplayBuffer:
    """The finals a client may not have received: (seq, encoded message), oldest first.

    Bounded by ``limit``: when a final would pass it, the oldest one is dropped, and a resume
    that needs it (:meth:`since` of a seq before it) fails.
    """

    def __init__(self, limit: int) -> None:
        self._finals: deque[tuple[int, str]] = deque()
        self._limit = limit
        self._lost_upto = -1  # the highest seq dropped unacknowledged

    def __len__(self) -> int:
        return len(self._finals)

    def add(self, seq: int, text: str) -> None:
        if len(self._finals) >= self._limit:
            self._lost_upto = self._finals.popleft()[0]
        self._finals.append((seq, text))

    def ack(self, seq: int) -> None:
        """The client holds every final up to ``seq``."""
        while self._finals and self._finals[0][0] <= seq:
            self._finals.popleft()

    def since(self, seq: int) -> list[str] | None:
        """The finals after ``seq``, in order; None when one of them was dropped."""
        if seq < self._lost_upto:
            return None
        return [text for s, text in self._finals if s > seq]


class Resumable(Protocol):
    """What the registry knows of a session (runtime.session.Session)."""

    @property
    def resume_token(self) -> str: ...


class Resumes:
    """The sessions a client may resume, by token. A token is 24 random bytes, URL-safe."""

    def __init__(self) -> None:
        self._sessions: dict[str, Resumable] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def add(self, session: Resumable) -> str:
        token = secrets.token_urlsafe(24)
        self._sessions[token] = session
        return token

    def get(self, token: str) -> Resumable | None:
        return self._sessions.get(token)

    def discard(self, token: str) -> None:
        self._sessions.pop(token, None)
