"""The daemon: admission control, routing, health/metrics and graceful shutdown.

One port (aiohttp, :mod:`.http`) serves everything: WebSocket streams (``/v1/stream``, native
protocol; ``/v1/listen``, Deepgram-compatible; ``/v2/listen``, Deepgram Flux; ``/``,
vosk-server-compatible; ``/v1/realtime``, OpenAI Realtime transcription), OpenAI-compatible
REST (``/v1/audio/transcriptions``, ``/v1/audio/translations``, ``/v1/models``:
:mod:`.openai_rest`), Deepgram's pre-recorded
``POST /v1/listen`` (:mod:`.deepgram_prerecorded`), ``GET /healthz``,
``GET /readyz`` (free capacity; 503 when full or overloaded), ``GET /metrics`` (Prometheus) and
the browser captioning page at ``/``. Sessions that break the protocol, exceed a limit or are
refused get an ``error`` message and a close code; the server keeps serving everyone else.
With ``wyoming_port``, the Wyoming protocol (Home Assistant's speech-to-text) has its own TCP
port (:mod:`.wyoming_server`); each of its requests is a session like the others. With
``agent_port``, HAProxy's agent check reads the free capacity there (:mod:`.agent_check`).

Shutdown (SIGINT/SIGTERM, or :meth:`Daemon.shutdown`): stop accepting connections, turn every
session's pending audio into finals, send them and ``closed``, close with 1001, stop the worker;
all within ``shutdown_timeout_s`` however busy the worker is (:mod:`.shutdown` has the phases).

A native session whose connection is lost is kept for ``resume_grace_s`` (:mod:`.resume`); a
connection to ``/v1/stream?resume=<token>&last_seq=<n>`` takes it over.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import signal
import time
from collections.abc import Callable
from importlib.resources import files
from typing import Any

from aiohttp import web

from streamwhisper.errors import ProtocolError
from streamwhisper.model.recognizer import Recognizer
from streamwhisper.streaming.config import StreamingConfig

from . import deepgram_prerecorded, wire, wyoming_zeroconf
from .agent_check import AgentCheck, agent_reply
from .config import ServerConfig, inference_threads
from .connection import Connection
from .deepgram_prerecorded import DeepgramPrerecorded
from .dialects import Dialect, deepgram, deepgram_flux, native, openai_realtime, vosk
from .dialects.wyoming import model_languages
from .http import HttpFront, WebSocketConnection, check_token, text_response, websocket_response
from .metrics import Metrics
from .offline import ModelInfo
from .openai_rest import OpenAIRest
from .session import ServerContext, Session
from .shutdown import Shutdown
from .uploads import UploadGate
from .worker import InferenceWorker
from .wyoming_server import WyomingServer

logger = logging.getLogger(__name__)

_WEB_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css"}


def _web_files() -> dict[str, tuple[bytes, str]]:
    """The captioning page's files by URL path (read once; clients never name a file)."""
    out: dict[str, tuple[bytes, str]] = {}
    root = files("streamwhisper.runtime") / "web"
    if not root.is_dir():
        return out
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in _WEB_TYPES:
            out["/" + entry.name] = (entry.read_bytes(), _WEB_TYPES[suffix])
    if "/index.html" in out:
        out["/"] = out["/index.html"]
    return out


def warm_up(recognizer: Recognizer, n_mels: int = 80) -> None:
    """Run one tiny request so that the first client does not pay for lazy initialisation."""
    import numpy as np

    from streamwhisper.model.recognizer import RecognitionRequest

    n_mels = getattr(getattr(getattr(recognizer, "model", None), "dims", None), "n_mels", n_mels)
    recognizer.recognize([RecognitionRequest(mel=np.full((n_mels, 100), -0.5, dtype=np.float32))])


class Daemon:
    """The streaming transcription server around one recogniser.

    Args:
        server: the server's settings.
        streaming: the settings every session's Streamer starts from.
        recognizer: the model behind the Recognizer seam; only the worker thread calls it.
        model_name: the model's name, reported to clients; the only model they may ask for.
        clock: monotonic seconds for lags, utilisation and latencies; the event loop's clock
            (asyncio's is ``time.monotonic``), so that they agree with the limits' timers.
    """

    def __init__(
        self,
        server: ServerConfig,
        streaming: StreamingConfig,
        recognizer: Recognizer,
        model_name: str,
        clock: Callable[[], float] = time.monotonic,
        on_share: Callable[[int], None] | None = None,
    ) -> None:
        self.server = server
        self.metrics = Metrics()
        worker = InferenceWorker(
            recognizer,
            max_batch=server.max_batch,
            # one request per stream, and one per upload being transcribed
            max_pending=4 * server.max_sessions + server.max_uploads,
            threads=inference_threads(server.workers),
            on_share=on_share,
            on_batch=self.metrics.observe_batch,
            clock=clock,
        )
        shutdown = Shutdown(server.shutdown_timeout_s, clock)
        self.ctx = ServerContext(server, streaming, worker, self.metrics, model_name, shutdown, clock=clock)
        # path -> a factory of per-session dialects (compatible protocols keep per-session state)
        self._dialects: dict[str, Callable[[], Dialect]] = {
            native.STREAM_PATH: native.NativeDialect,
            deepgram.LISTEN_PATH: deepgram.DeepgramDialect,  # Deepgram live streaming
            deepgram_flux.PATH: deepgram_flux.FluxDialect,  # Deepgram Flux (turns)
            vosk.PATH: vosk.VoskDialect,  # vosk-server (WebSocket on /; plain GET / is the page)
            openai_realtime.PATH: openai_realtime.RealtimeDialect,  # OpenAI Realtime transcription
        }
        model = ModelInfo.of(recognizer)
        self.uploads = UploadGate(server, self.ctx.shutdown, self.ctx.mean_lag)
        self.rest = OpenAIRest(self.ctx, model, self.uploads)
        self.prerecorded = DeepgramPrerecorded(self.ctx, model, self.uploads)
        self._web = _web_files() if server.web_page else {}
        self._front = HttpFront(server, self._route)
        self._wyoming: WyomingServer | None = None
        if server.wyoming_port:
            languages = model_languages(recognizer, model_name)
            self._wyoming = WyomingServer(
                server, model_name, languages, self.metrics, self.ctx.shutdown, self.capacity_refusal, self.run_session
            )
        self._agent = AgentCheck(server.host, server.agent_port, self._agent_reply) if server.agent_port else None
        self._zeroconf: Any = None
        self._started = False
        self._handlers: set[asyncio.Task[Any]] = set()
        self._closed = asyncio.Event()

    def add_dialect(self, path: str, factory: Callable[[], Dialect]) -> None:
        """Serve a compatible protocol on ``path`` (before :meth:`start`)."""
        self._dialects[path] = factory

    @property
    def port(self) -> int:
        return self._front.port

    @property
    def url(self) -> str:
        scheme = "wss" if self.server.tls_cert else "ws"
        return f"{scheme}://{self.server.host}:{self.port}"

    @property
    def wyoming_port(self) -> int | None:
        """The Wyoming port, or None when it is off."""
        return self._wyoming.port if self._wyoming is not None else None

    @property
    def agent_port(self) -> int | None:
        """The HAProxy agent-check port, or None when it is off."""
        return self._agent.port if self._agent is not None else None

    async def start(self) -> None:
        self.ctx.worker.start()
        await self._front.start()
        if self._agent is not None:
            await self._agent.start()
            logger.info("HAProxy agent check on tcp://%s:%d", self.server.host, self._agent.port)
        if self._wyoming is not None:
            await self._wyoming.start()
            host = self.server.wyoming_host or self.server.host
            logger.info("Wyoming (Home Assistant) on tcp://%s:%d", host, self._wyoming.port)
            if self.server.auth_token:
                logger.warning("the Wyoming port has no authentication (the protocol has none)")
            if self.server.wyoming_zeroconf:
                announced = wyoming_zeroconf.announcement(host, self._wyoming.port)
                self._zeroconf = await wyoming_zeroconf.advertise(announced)
        self._started = True
        logger.info("serving %s on %s", self.ctx.model_name, self.url)

    async def serve_forever(self) -> None:
        """Start, then run until SIGINT/SIGTERM (or :meth:`shutdown`), then shut down gracefully."""
        if not self._started:
            await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.shutdown()))
        try:
            await self._closed.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    async def shutdown(self) -> None:
        """Stop accepting, finalise and close every session (1001), stop the worker."""
        if self.ctx.shutdown.is_set():
            await self._closed.wait()
            return
        logger.info("shutting down: finalising %d session(s)", len(self.ctx.sessions))
        shutdown = self.ctx.shutdown
        shutdown.begin()
        self._front.stop_accepting()  # sessions and uploads end themselves
        wyoming = self._wyoming.tasks if self._wyoming is not None else set()
        if self._wyoming is not None:
            self._wyoming.stop_accepting()
        if self._handlers or wyoming:
            _, late = await asyncio.wait(self._handlers | wyoming, timeout=shutdown.left(shutdown.finish_s / 2))
            for task in late:  # past the deadline (a close handshake the client never answers)
                task.cancel()
        if self._zeroconf is not None:
            await wyoming_zeroconf.withdraw(self._zeroconf)
        if self._wyoming is not None:
            await self._wyoming.close()
        await self._front.close()
        if self._agent is not None:  # it said "drain" until now
            await self._agent.close()
        await self.ctx.worker.stop(within_s=shutdown.left())
        self._closed.set()

    # -- routing -----------------------------------------------------------------------------------

    async def _route(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            return await self._dispatch(request)
        finally:
            self._handlers.discard(task)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if "websocket" in request.headers.get("Upgrade", "").lower():
            factory = self._dialects.get(path)
            if factory is None or request.method != "GET":
                return text_response(404, "no WebSocket endpoint here (use /v1/stream)\n")
            ws = websocket_response(self.server)
            await ws.prepare(request)
            await self._session(WebSocketConnection(request, ws, self.server.max_message_bytes), factory())
            return ws
        rest = self.rest.handler(request.method, path)
        if rest is not None:
            return await rest(request)
        if path == deepgram_prerecorded.PATH and request.method == "POST":
            return await self.prerecorded.transcribe(request)
        if request.method not in ("GET", "HEAD"):
            return text_response(405, "method not allowed\n")
        if path == "/healthz":
            return text_response(200, "ok\n")
        if path == "/readyz":
            state = self._readiness()
            return text_response(200 if state["ready"] else 503, json.dumps(state) + "\n", "application/json")
        if path == "/metrics":
            self.metrics.queue_depth.set(self.ctx.worker.pending)
            self.metrics.count_worker(self.ctx.worker.stats.interrupted, self.ctx.worker.stats.paused)
            self.metrics.lag.set(self.ctx.mean_lag())
            self.metrics.outbox_depth.set(sum(len(s.outbox) for s in self.ctx.sessions))
            return text_response(200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        if path in self._web:
            body, kind = self._web[path]
            return text_response(200, body, kind)
        return text_response(404, "not found\n")

    def _agent_reply(self) -> str:
        return agent_reply(self._readiness()["free"], self.server.max_sessions, self.ctx.shutdown.is_set())

    def _readiness(self) -> dict[str, Any]:
        cfg = self.server
        sessions = len(self.ctx.sessions)
        lag = self.ctx.mean_lag()
        ready = not self.ctx.shutdown.is_set() and sessions < cfg.max_sessions and lag <= cfg.refuse_lag_s
        return {
            "ready": ready,
            "sessions": sessions,
            "max_sessions": cfg.max_sessions,
            "free": max(cfg.max_sessions - sessions, 0) if ready else 0,
            "mean_lag_s": round(lag, 3),
            "queue": self.ctx.worker.pending,
            "uploads": self.uploads.active,
            "model": self.ctx.model_name,
        }

    # -- WebSocket sessions ------------------------------------------------------------------------

    async def _session(self, ws: Connection, dialect: Dialect) -> None:
        query = dict(ws.query)
        if native.RESUME_PARAM in query and isinstance(dialect, native.NativeDialect):
            await self._resume(ws, dialect, query)
            return
        refusal = self._authorize(ws, query) or self.capacity_refusal()
        if refusal is not None:
            self.metrics.refused.labels(refusal.kind).inc()
            await self._reject(ws, dialect, refusal)
            return
        try:
            settings = dialect.settings(query)
        except ProtocolError as exc:
            self.metrics.errors.labels(exc.kind).inc()
            await self._reject(ws, dialect, exc)
            return
        await self.run_session(ws, dialect, settings)

    async def run_session(self, ws: Connection, dialect: Dialect, settings: wire.SessionSettings) -> None:
        """Run an admitted session to its end (the Wyoming port admits its requests itself)."""
        resumable = dialect if isinstance(dialect, native.NativeDialect) else None
        session = Session(ws, self.ctx, secrets.token_hex(8), settings, dialect, resumable)
        self.ctx.sessions.add(session)
        self.metrics.sessions.set(len(self.ctx.sessions))
        self.metrics.sessions_total.inc()
        try:
            await session.run()
        except ProtocolError as exc:  # settings the session could not start with
            self.metrics.errors.labels(exc.kind).inc()
            await self._reject(ws, dialect, exc)
        finally:
            self.ctx.sessions.discard(session)
            self.metrics.sessions.set(len(self.ctx.sessions))

    async def _resume(self, ws: Connection, dialect: Dialect, query: dict[str, str]) -> None:
        """A client reconnecting to its session (resume.py): the session takes the connection
        over and lets it go when done with it; refused (``resume_failed``, 1008) when the token
        names no session (unknown, expired, or the daemon restarted)."""
        refusal = self._authorize(ws, query)
        if refusal is None and self.ctx.shutdown.is_set():
            refusal = ProtocolError("the server is shutting down", wire.CLOSE_GOING_AWAY, "shutting_down")
        try:
            if refusal is not None:
                raise refusal
            last_seq = wire.query_int(query, native.LAST_SEQ_PARAM, -1, -1, 2**62)
            session = self.ctx.resumes.get(query[native.RESUME_PARAM])
            if not isinstance(session, Session):
                raise ProtocolError(
                    "cannot resume: no session has this token (expired, or the server restarted); start a new session",
                    wire.CLOSE_POLICY,
                    "resume_failed",
                )
            await session.resume(ws, last_seq)
        except ProtocolError as exc:
            if exc.kind == "resume_failed":
                self.metrics.resumes.labels("refused").inc()
            else:
                self.metrics.errors.labels(exc.kind).inc()
            await self._reject(ws, dialect, exc)

    def _authorize(self, ws: Connection, query: dict[str, str]) -> ProtocolError | None:
        cfg = self.server
        if not check_token(cfg, ws.headers, query):
            return ProtocolError("missing or wrong token", wire.CLOSE_POLICY, "unauthorized")
        origin = ws.headers.get("Origin")
        if cfg.allowed_origins and origin is not None and origin not in cfg.allowed_origins:
            return ProtocolError(f"origin {origin!r} is not allowed", wire.CLOSE_POLICY, "origin_not_allowed")
        return None

    def capacity_refusal(self) -> ProtocolError | None:
        """Why a new session cannot start now (shutdown, every session in use, overload), or None."""
        cfg = self.server
        if self.ctx.shutdown.is_set():
            return ProtocolError("the server is shutting down", wire.CLOSE_GOING_AWAY, "shutting_down")
        if len(self.ctx.sessions) >= cfg.max_sessions:
            return ProtocolError(
                f"all {cfg.max_sessions} sessions are in use; try again later", wire.CLOSE_OVERLOADED, "over_capacity"
            )
        lag = self.ctx.mean_lag()
        if lag > cfg.refuse_lag_s:
            return ProtocolError(
                f"the server is overloaded (transcripts lag {lag:.1f} s); try again later",
                wire.CLOSE_OVERLOADED,
                "overloaded",
            )
        return None

    @staticmethod
    async def _reject(ws: Connection, dialect: Dialect, error: ProtocolError) -> None:
        text = dialect.error(error.kind, str(error))
        try:
            if text is not None:
                await ws.send(text)
        except Exception:  # the client is gone already
            pass
        await ws.close(error.code, error.kind)
