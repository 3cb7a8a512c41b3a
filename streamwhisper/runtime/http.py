"""The daemon's front: one aiohttp server for HTTP requests with bodies and WebSocket streams.

aiohttp serves every request on one port; the daemon routes them (:mod:`.server`). Sessions see
a WebSocket only through :class:`~streamwhisper.runtime.connection.Connection`, which
:class:`WebSocketConnection` implements here.

Limits that hold before any handler runs:

- a connection must send its request line and headers within ``handshake_timeout_s`` (aiohttp's
  keep-alive timer, which 3.14 starts when the connection opens and which a trickle of bytes
  does not restart), so a client that sends nothing or one byte a second is dropped;
- a request line or header over 8190 bytes, or over 100 headers, is answered with 400;
- a WebSocket message over ``max_message_bytes`` is refused from its frame header, before any of
  its payload is buffered (a compressed one as it inflates, one byte past the limit at most):
  :meth:`WebSocketConnection.receive` raises ``message_too_big`` and the session answers as for
  any bad message (its error, its finals, 1009). After a refused frame the connection
  lingers: the server sends FIN, discards what the client still sends and closes when the client
  does, because closing a socket with unread data makes the kernel reset the connection, and
  the client would lose the close frame and the messages before it. aiohttp buffers at most
  128 KiB of received frames per connection before it stops reading the socket, and waits for
  the client once 64 KiB are waiting to be sent;
- a ping every 20 s, answered within 10 s, keeps a WebSocket open, whatever the worker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from streamwhisper.errors import ConfigError, ProtocolError

from .config import ServerConfig
from .connection import ConnectionClosed

logger = logging.getLogger(__name__)

HEARTBEAT_S = 20.0  # ping interval; a pong must come within half of it
CLOSE_TIMEOUT_S = 10.0  # how long a close waits for the client's close frame
WRITE_LIMIT = 64 * 1024  # bytes waiting in the transport before a send waits for the client
MAX_LINE = 8190  # request line and each header, bytes
MAX_HEADERS = 100

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _TooBig(Exception):
    """aiohttp refused a message over its size limit (raised out of ``receive``)."""


class _Linger(asyncio.Protocol):
    """Stands in for aiohttp's protocol while a connection lingers: drops what the client still
    sends and lets the transport close when the client closes its side."""

    def __init__(self, inner: asyncio.BaseProtocol, done: asyncio.Future[None]) -> None:
        self._inner, self._done = inner, done

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(None)
        self._inner.connection_lost(exc)


class LimitedWebSocketResponse(web.WebSocketResponse):
    """aiohttp's WebSocketResponse, except after a message over ``max_msg_size``.

    aiohttp refuses such a message from its frame header and would close the connection at once
    (close frame 1009, no error message, none of the session's finals, and a reset if the client
    is still sending). Here :meth:`receive` raises :class:`_TooBig` instead, leaving the
    answer and the close to the session; and a connection whose reader has failed lingers at
    its close (see the module's docstring) instead of being closed under the client.
    """

    _receiving = False
    _lingering: asyncio.Future[None] | None = None

    async def receive(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109 (aiohttp's signature)
        self._receiving = True
        try:
            return await super().receive(timeout)
        finally:
            self._receiving = False

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        if self._receiving and code == WSCloseCode.MESSAGE_TOO_BIG:
            raise _TooBig  # receive() closing on the size limit: the session answers it
        closed = await super().close(code=code, message=message, drain=drain)
        if self._lingering is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await asyncio.shield(self._lingering)
            transport = self._req.transport if self._req is not None else None
            if transport is not None:
                transport.close()
        return closed

    def _close_transport(self) -> None:
        # aiohttp closes the transport here, as soon as its close frame is sent and the client's
        # has come or the reader failed; after a failed read the client may still be sending
        transport = self._req.transport if self._req is not None else None
        failed = self._reader is not None and self._reader.exception() is not None
        if transport is None or not failed or not transport.can_write_eof() or self._lingering is not None:
            super()._close_transport()
            return
        self._lingering = asyncio.get_running_loop().create_future()
        transport.set_protocol(_Linger(transport.get_protocol(), self._lingering))
        transport.write_eof()
        transport.resume_reading()


class WebSocketConnection:
    """A :class:`~streamwhisper.runtime.connection.Connection` over aiohttp's WebSocketResponse."""

    def __init__(self, request: web.Request, ws: web.WebSocketResponse, max_message_bytes: int) -> None:
        self.path = request.path
        self.query: Mapping[str, str] = {k: v for k, v in request.query.items()}
        self.headers: Mapping[str, str] = request.headers
        self.transport = request.transport
        self._ws = ws
        self._limit = max_message_bytes

    async def receive(self) -> str | bytes:
        while True:
            try:
                message = await self._ws.receive()
            except _TooBig:
                raise self._too_big("a message") from None
            if message.type is WSMsgType.TEXT or message.type is WSMsgType.BINARY:
                data: str | bytes = message.data
                # aiohttp lets a compressed message inflate to one byte more than a plain one
                size = len(data) if isinstance(data, bytes) else len(data.encode())
                if size > self._limit:
                    raise self._too_big(f"a message of {size} bytes")
                return data
            if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                # ERROR: aiohttp closed the connection itself (a malformed frame, a missed pong);
                # CLOSE: the client's close frame; CLOSED: the TCP stream ended without one
                clean = message.type is WSMsgType.CLOSE
                raise ConnectionClosed(str(message.data or message.type.name), clean=clean)

    def _too_big(self, what: str) -> ProtocolError:
        text = f"{what} over the limit of {self._limit} bytes"
        return ProtocolError(text, WSCloseCode.MESSAGE_TOO_BIG, "message_too_big")

    async def send(self, text: str) -> None:
        if self._ws.closed:
            raise ConnectionClosed("closed")
        try:
            await self._ws.send_str(text)
        except (ConnectionError, RuntimeError) as exc:
            raise ConnectionClosed(str(exc)) from None

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):  # the client is gone already
            await self._ws.close(code=code, message=reason.encode()[:123])


class _ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server log: a client's malformed request is one debug line, not a traceback."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.debug("%s: %s", str(msg) % args if args else msg, exc_info.message)
        else:
            self.error(msg, *args, exc_info=exc_info, **kwargs)


def check_token(server: ServerConfig, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """Whether a request carries the configured token (``Authorization: Bearer`` or ``Token``,
    or ``?token=`` / ``?api_key=``); compared in constant time. True when no token is configured."""
    if not server.auth_token:
        return True
    given = query.get("token", "") or query.get("api_key", "")
    auth = headers.get("Authorization", "")
    if auth.lower().startswith(("bearer ", "token ")):
        given = auth.split(None, 1)[1].strip()
    return hmac.compare_digest(given.encode(), server.auth_token.encode())


def websocket_response(server: ServerConfig) -> web.WebSocketResponse:
    """A WebSocket response with the daemon's limits (see the module's docstring)."""
    return LimitedWebSocketResponse(
        timeout=CLOSE_TIMEOUT_S,
        heartbeat=HEARTBEAT_S,
        max_msg_size=server.max_message_bytes + 1,  # aiohttp refuses sizes >= max_msg_size
        writer_limit=WRITE_LIMIT,
    )


def text_response(status: int, body: str | bytes, content_type: str = "text/plain") -> web.Response:
    data = body.encode() if isinstance(body, str) else body
    response = web.Response(status=status, body=data, headers={"Cache-Control": "no-store"})
    response.content_type, _, charset = content_type.partition("; charset=")
    if charset:
        response.charset = charset
    return response


def ssl_context(cert: str, key: str) -> ssl.SSLContext | None:
    if not cert:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS certificate {cert} / key {key}: {exc}") from None
    return context


class HttpFront:
    """aiohttp's server on the daemon's address, sending every request to ``handler``."""

    def __init__(self, server: ServerConfig, handler: Handler) -> None:
        self._config = server
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            logger=_ServerLog(logger, {}),
            keepalive_timeout=server.handshake_timeout_s,
            max_line_size=MAX_LINE,
            max_field_size=MAX_LINE,
            max_headers=MAX_HEADERS,
            shutdown_timeout=5.0,  # the daemon has waited for its sessions already
        )
        self._site: web.TCPSite | None = None

    @property
    def port(self) -> int:
        assert self._site is not None and self._site._server is not None, "start() first"
        sockets = self._site._server.sockets  # type: ignore[attr-defined]  # an asyncio.Server
        return int(sockets[0].getsockname()[1])

    async def start(self) -> None:
        cfg = self._config
        context = ssl_context(cfg.tls_cert, cfg.tls_key)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, cfg.host, cfg.port, ssl_context=context)
        await self._site.start()

    def stop_accepting(self) -> None:
        """Close the listening socket; connections already open carry on."""
        if self._site is not None and self._site._server is not None:
            self._site._server.close()

    async def close(self) -> None:
        """Close every connection still open and release the port."""
        await self._runner.cleanup()
