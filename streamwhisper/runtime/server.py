"""The daemon: a websockets server with admission control, health/metrics and graceful shutdown.

One port serves everything: WebSocket streams (``/v1/stream``, native protocol; ``/v1/listen``,
Deepgram-compatible; ``/``, vosk-server-compatible), ``GET /healthz``,
``GET /readyz`` (free capacity; 503 when full or overloaded), ``GET /metrics`` (Prometheus) and
the browser captioning page at ``/``. Sessions that break the protocol, exceed a limit or are
refused get an ``error`` message and a close code; the server keeps serving everyone else.

Shutdown (SIGINT/SIGTERM, or :meth:`Daemon.shutdown`): stop accepting connections, turn every
session's pending audio into finals, send them and ``closed``, close with 1001, stop the worker.
"""

from __future__ import annotations

import asyncio
import hmac
import http
import json
import logging
import secrets
import signal
import ssl
from collections.abc import Callable
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from streamwhisper.errors import ConfigError, ProtocolError
from streamwhisper.model.recognizer import Recognizer
from streamwhisper.streaming.config import StreamingConfig

from . import wire
from .config import ServerConfig
from .dialects import Dialect, deepgram, native, vosk
from .metrics import Metrics
from .session import ServerContext, Session
from .worker import InferenceWorker

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


def _response(status: int, body: bytes, content_type: str) -> Response:
    headers = Headers()
    headers["Content-Type"] = content_type
    headers["Content-Length"] = str(len(body))
    headers["Cache-Control"] = "no-store"
    return Response(status, http.HTTPStatus(status).phrase, headers, body)


def _ssl_context(cert: str, key: str) -> ssl.SSLContext | None:
    if not cert:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS certificate {cert} / key {key}: {exc}") from None
    return context


class Daemon:
    """The streaming transcription server around one recogniser.

    Args:
        server: the server's settings.
        streaming: the settings every session's Streamer starts from.
        recognizer: the model behind the Recognizer seam; only the worker thread calls it.
        model_name: the model's name, reported to clients; the only model they may ask for.
    """

    def __init__(
        self, server: ServerConfig, streaming: StreamingConfig, recognizer: Recognizer, model_name: str
    ) -> None:
        self.server = server
        self.metrics = Metrics()
        worker = InferenceWorker(
            recognizer,
            max_batch=server.max_batch,
            max_pending=4 * server.max_sessions,
            on_batch=self.metrics.observe_batch,
        )
        self.ctx = ServerContext(server, streaming, worker, self.metrics, model_name, asyncio.Event())
        # path -> a factory of per-session dialects (compatible protocols keep per-session state)
        self._dialects: dict[str, Callable[[], Dialect]] = {
            native.STREAM_PATH: native.NativeDialect,
            deepgram.LISTEN_PATH: deepgram.DeepgramDialect,  # Deepgram live streaming
            vosk.PATH: vosk.VoskDialect,  # vosk-server (WebSocket on /; plain GET / is the page)
        }
        self._web = _web_files() if server.web_page else {}
        self._server: Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._closed = asyncio.Event()

    def add_dialect(self, path: str, factory: Callable[[], Dialect]) -> None:
        """Serve a compatible protocol on ``path`` (before :meth:`start`)."""
        self._dialects[path] = factory

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        scheme = "wss" if self.server.tls_cert else "ws"
        return f"{scheme}://{self.server.host}:{self.port}"

    async def start(self) -> None:
        cfg = self.server
        self.ctx.worker.start()
        self._server = await serve(
            self._handle,
            cfg.host,
            cfg.port,
            process_request=self._process_request,
            ssl=_ssl_context(cfg.tls_cert, cfg.tls_key),
            # Our own check answers messages up to 4x the limit with an error and finals
            # (1009); beyond that websockets closes the connection itself (also 1009).
            max_size=4 * cfg.max_message_bytes,
            max_queue=8,
            write_limit=64 * 1024,
            ping_interval=20,
            ping_timeout=20,
            server_header="streamwhisper",
        )
        logger.info("serving %s on %s", self.ctx.model_name, self.url)

    async def serve_forever(self) -> None:
        """Start, then run until SIGINT/SIGTERM (or :meth:`shutdown`), then shut down gracefully."""
        if self._server is None:
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
        self.ctx.shutdown.set()
        assert self._server is not None
        self._server.close(close_connections=False)  # stop accepting; sessions close themselves
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=self.server.shutdown_timeout_s + 5)
        self._server.close()
        await self._server.wait_closed()
        await self.ctx.worker.stop()
        self._closed.set()

    # -- HTTP --------------------------------------------------------------------------------------

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
            "model": self.ctx.model_name,
        }

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        upgrade = "websocket" in request.headers.get("Upgrade", "").lower()
        if upgrade:
            if path in self._dialects:
                return None
            return _response(404, b"no WebSocket endpoint here (use /v1/stream)\n", "text/plain")
        if path == "/healthz":
            return _response(200, b"ok\n", "text/plain")
        if path == "/readyz":
            state = self._readiness()
            return _response(200 if state["ready"] else 503, json.dumps(state).encode() + b"\n", "application/json")
        if path == "/metrics":
            self.metrics.queue_depth.set(self.ctx.worker.pending)
            self.metrics.lag.set(self.ctx.mean_lag())
            self.metrics.outbox_depth.set(sum(len(s.outbox) for s in self.ctx.sessions))
            return _response(200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        if path in self._web:
            body, kind = self._web[path]
            return _response(200, body, kind)
        return _response(404, b"not found\n", "text/plain")

    # -- WebSocket ---------------------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._session(ws)
        finally:
            self._handlers.discard(task)

    async def _session(self, ws: ServerConnection) -> None:
        assert ws.request is not None
        url = urlsplit(ws.request.path)
        dialect = self._dialects[url.path]()
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        refusal = self._admit(ws, query)
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
        # A dialect may need its own Session (vosk answers every audio frame).
        session = Session(ws, self.ctx, secrets.token_hex(8), settings, dialect)
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

    def _admit(self, ws: ServerConnection, query: dict[str, str]) -> ProtocolError | None:
        cfg = self.server
        assert ws.request is not None
        headers = ws.request.headers
        if cfg.auth_token:
            given = query.get("token", "")
            auth = headers.get("Authorization", "")
            if auth.lower().startswith(("bearer ", "token ")):
                given = auth.split(None, 1)[1].strip()
            if not hmac.compare_digest(given.encode(), cfg.auth_token.encode()):
                return ProtocolError("missing or wrong token", wire.CLOSE_POLICY, "unauthorized")
        origin = headers.get("Origin")
        if cfg.allowed_origins and origin is not None and origin not in cfg.allowed_origins:
            return ProtocolError(f"origin {origin!r} is not allowed", wire.CLOSE_POLICY, "origin_not_allowed")
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
    async def _reject(ws: ServerConnection, dialect: Dialect, error: ProtocolError) -> None:
        text = dialect.error(error.kind, str(error))
        try:
            if text is not None:
                await ws.send(text)
            await ws.close(error.code, error.kind)
        except Exception:  # the client is gone already
            pass
