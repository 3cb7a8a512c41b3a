"""The daemon's settings (``[server]``): address, security, limits and the inference worker.

Frozen and validated at construction; :mod:`streamwhisper.config` loads them with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamwhisper.cores import available_cores
from streamwhisper.errors import ConfigError


@dataclass(frozen=True)
class ServerConfig:
    """The daemon (``streamwhisper serve``): address, security, limits and the inference worker."""

    host: str = "127.0.0.1"
    port: int = 8765
    # Clients must send this token (Authorization: Bearer, or ?token=); "" = no authentication.
    auth_token: str = ""
    # Origin headers accepted from browsers (e.g. "https://captions.example.org"); empty = any.
    allowed_origins: tuple[str, ...] = ()
    # wss: both files set turns TLS on.
    tls_cert: str = ""
    tls_key: str = ""
    max_sessions: int = 16
    max_message_bytes: int = 1_048_576  # a larger message is refused unread (message_too_big, 1009)
    max_session_s: float = 14_400.0  # session duration limit (4 h); 0 = none
    idle_timeout_s: float = 60.0  # no message for this long ends the session; 0 = never
    # Messages waiting for a client that does not read; beyond this the session is closed (1008).
    max_outbox: int = 256
    # Resume (native protocol): a session whose connection is lost is kept this many seconds for
    # its client to reconnect with the ``resume_token`` of its ``ready``; 0 = no resume.
    resume_grace_s: float = 30.0
    # Finals a session keeps for replay until its client acknowledges them; when more wait, the
    # oldest is dropped, and a resume that needed it is refused (resume_failed).
    max_replay: int = 256
    # Most requests run together by the inference worker (encoder batch and decoder steps); with
    # several worker threads, a batch takes its thread's share of the waiting requests.
    max_batch: int = 16
    # Batches the inference worker runs at once, from its one queue; 0: two on a CPU with two
    # cores or more, else one (see inference_threads).
    workers: int = 0
    # A session whose transcript lags this far behind its audio sends requests less often (longer
    # steps, fewer partials); when the mean lag of all sessions is above refuse_lag_s, new
    # sessions are refused with 1013.
    degrade_lag_s: float = 1.5
    refuse_lag_s: float = 4.0
    max_step_s: float = 4.0
    # Send the browser captioning page at "/".
    web_page: bool = True
    # A graceful shutdown (SIGTERM) ends within this many seconds, however busy the worker is:
    # sessions wait for their last finals until shortly before it, then close each utterance
    # from what was heard (runtime/shutdown.py).
    shutdown_timeout_s: float = 30.0
    # A connection must have sent its request line and headers within this many seconds (and an
    # idle keep-alive connection is closed after it): a client that sends nothing, or headers a
    # byte at a time, is dropped.
    handshake_timeout_s: float = 10.0
    # OpenAI-compatible uploads (POST /v1/audio/transcriptions): the largest file in bytes (a
    # larger one is refused with 413 as soon as it passes the limit) ...
    max_upload_bytes: int = 26_214_400
    # ... the longest decoded audio in seconds ...
    max_upload_s: float = 3600.0
    # ... and the uploads transcribed at once; one more is refused with 429.
    max_uploads: int = 2
    # The Wyoming protocol (Home Assistant's speech-to-text) on its own TCP port: 0 = off, -1 =
    # any free port; on wyoming_host ("" = host). wyoming_zeroconf announces it over mDNS.
    wyoming_port: int = 0
    wyoming_host: str = ""
    wyoming_zeroconf: bool = False
    # HAProxy's agent check on this TCP port (on host): it answers the free share of
    # max_sessions as a weight ("ready 75%"), or "drain" while shutting down. 0 = off, -1 = any
    # free port.
    agent_port: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("server.port must be in [0, 65535]")
        if self.max_sessions < 1:
            raise ConfigError("server.max_sessions must be >= 1")
        if self.max_message_bytes < 1024:
            raise ConfigError("server.max_message_bytes must be >= 1024")
        if self.max_session_s < 0 or self.idle_timeout_s < 0:
            raise ConfigError("server.max_session_s and server.idle_timeout_s must be >= 0")
        if self.max_outbox < 8:
            raise ConfigError("server.max_outbox must be >= 8")
        if self.resume_grace_s < 0:
            raise ConfigError("server.resume_grace_s must be >= 0 (0 turns resume off)")
        if self.max_replay < 1:
            raise ConfigError("server.max_replay must be >= 1")
        if self.max_batch < 1:
            raise ConfigError("server.max_batch must be >= 1")
        if self.workers < 0:
            raise ConfigError("server.workers must be >= 0 (0: as many as suit the device)")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("server.tls_cert and server.tls_key must be given together")
        if not 0 < self.degrade_lag_s < self.refuse_lag_s:
            raise ConfigError("need 0 < server.degrade_lag_s < server.refuse_lag_s")
        if self.max_step_s < 1.0:
            raise ConfigError("server.max_step_s must be >= 1")
        if self.shutdown_timeout_s <= 0:
            raise ConfigError("server.shutdown_timeout_s must be > 0")
        if self.handshake_timeout_s <= 0:
            raise ConfigError("server.handshake_timeout_s must be > 0")
        if self.max_upload_bytes < 1024 or self.max_upload_s <= 0:
            raise ConfigError("server.max_upload_bytes must be >= 1024 and server.max_upload_s > 0")
        if not -1 <= self.wyoming_port <= 65535:
            raise ConfigError("server.wyoming_port must be in [-1, 65535] (0 = off, -1 = any free port)")
        if not -1 <= self.agent_port <= 65535:
            raise ConfigError("server.agent_port must be in [-1, 65535] (0 = off, -1 = any free port)")
        if self.max_uploads < 0:
            raise ConfigError("server.max_uploads must be >= 0 (0 turns uploads off)")


def inference_threads(workers: int, device: str = "cpu") -> int:
    """``server.workers``, with 0 resolved for ``device``: on a CPU with two cores or more, two
    threads (under load one batch runs while the other runs Python between small tensor
    operations: eight streams on two cores, final p95 3.3 s against 5.2 s with one, and a lone
    batch still gets every core); one on a GPU or a single core."""
    if workers:
        return workers
    return 2 if device.startswith("cpu") and available_cores() >= 2 else 1
