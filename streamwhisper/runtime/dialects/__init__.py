"""What every protocol module implements: the :class:`Dialect` seam between a session and a wire format.

A session speaks to its client only through its dialect: the dialect reads the client's text
messages into the typed messages of :mod:`streamwhisper.runtime.wire` and writes events, status
and errors in its protocol's format. One module per protocol: the native one (``wire``),
Deepgram's (``deepgram``), vosk's (``vosk``) and Wyoming's (``wyoming``, on its own TCP port).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from streamwhisper.events import Event

from .. import wire


class Dialect(Protocol):
    """How one protocol (native, or a compatible one) reads client text and writes events."""

    name: str

    def settings(self, query: dict[str, str]) -> wire.SessionSettings: ...

    def parse(self, text: str) -> wire.ClientMessage: ...

    def ready(self, session: SessionInfo) -> str | None: ...

    def event(self, event: Event, session: SessionInfo) -> str | None: ...

    def audio(self, session: SessionInfo) -> tuple[str, bool] | None:
        """An answer to every audio frame (vosk's protocol), and whether a newer one may
        replace it while unsent; None for protocols that do not answer audio."""
        ...

    def error(self, code: str, message: str) -> str | None: ...

    def status(self, lag_s: float, step_s: float) -> str | None: ...

    def closed(self, session: SessionInfo, reason: str) -> str | None: ...


@dataclass
class SessionInfo:
    """What dialects may read about a session."""

    id: str
    model: str
    settings: wire.SessionSettings
    limits: dict[str, Any]
    audio_seconds: float = 0.0
    words: int = 0
    finals: int = 0
