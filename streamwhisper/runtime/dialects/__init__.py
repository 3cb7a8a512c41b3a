"""What every protocol module implements: the :class:`Dialect` seam between a session and a wire format.

A session speaks to its client only through its dialect: the dialect reads the client's text
messages into the typed messages of :mod:`streamwhisper.runtime.wire` and writes events, status
and errors in its protocol's format. One module per protocol: the native one (``native``),
Deepgram's (``deepgram``), vosk's (``vosk``), OpenAI's Realtime transcription
(``openai_realtime``) and Wyoming's (``wyoming``, on its own TCP port).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from streamwhisper.events import Event

from .. import wire

#: What a dialect sends: one message, several in order, or none.
Texts: TypeAlias = str | Sequence[str] | None


class Dialect(Protocol):
    """How one protocol (native, or a compatible one) reads client text and writes events."""

    name: str

    def settings(self, query: dict[str, str]) -> wire.SessionSettings: ...

    def parse(self, text: str) -> wire.ClientMessage | tuple[wire.ClientMessage, ...]:
        """One client text message as the typed message(s) it stands for, handled in order."""
        ...

    def ready(self, session: SessionInfo) -> str | None: ...

    def event(self, event: Event, session: SessionInfo) -> Texts: ...

    def audio(self, session: SessionInfo) -> tuple[str, bool] | None:
        """An answer to every audio frame (vosk's protocol), and whether a newer one may
        replace it while unsent; None for protocols that do not answer audio."""
        ...

    def error(self, code: str, message: str) -> str | None: ...

    def status(self, lag_s: float, step_s: float) -> str | None: ...

    def closed(self, session: SessionInfo, reason: str) -> Texts: ...


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
    # resume (native sessions, server.resume_grace_s > 0): the token a client resumes with, and
    # how long the session waits for it after its connection is lost; "" and 0 otherwise
    resume_token: str = ""
    resume_grace_s: float = 0.0
    # A dialect that must know when a turn's transcript is complete leaves a callback here (from
    # parse or event). After each client message, each batch of events and the flush at the end
    # of the stream, the session hands them to its Pump as marks: each is called once every
    # utterance that had ended by then is closed (its last final was sent); what it returns is sent.
    marks: list[Callable[[], Texts]] = field(default_factory=list)
