"""HAProxy's agent check: the daemon's free capacity on a small TCP port (``server.agent_port``).

HAProxy (``agent-check agent-port P`` on a ``server`` line) connects every ``agent-inter`` and
reads one line (docs: configuration.txt, "agent-check"). The daemon answers and closes:

* ``ready 75%``: the server's weight becomes 75 % of the weight configured in HAProxy. The
  percentage is the share of ``max_sessions`` that is free, 0 when ``/readyz`` says not ready
  (every session in use, or transcripts lagging more than ``refuse_lag_s``), so a full or
  overloaded node gets no new connection; at least 1 % while a session is free. ``ready``
  cancels a ``drain`` an earlier run of the daemon reported.
* ``drain``: the daemon is shutting down; HAProxy sends it nothing new while its sessions end.

Nothing is read from the connection (HAProxy's ``agent-send`` is ignored), so a connection costs
one short write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 2.0


def agent_reply(free: int, max_sessions: int, shutting_down: bool) -> str:
    """The agent's line for a daemon with ``free`` of ``max_sessions`` sessions free."""
    if shutting_down:
        return "drain\n"
    percent = 0 if free <= 0 else max(1, round(100 * free / max_sessions))
    return f"ready {percent}%\n"


class AgentCheck:
    """The agent's TCP server; ``reply`` gives the line to send (called per connection)."""

    def __init__(self, host: str, port: int, reply: Callable[[], str]) -> None:
        self._host, self._port, self._reply = host, port, reply
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        port = max(self._port, 0)  # -1: any free port
        self._server = await asyncio.start_server(self._answer, self._host, port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self._reply().encode())
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await writer.drain()
        except (ConnectionError, TimeoutError) as exc:
            logger.debug("agent check: %r", exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                async with asyncio.timeout(WRITE_TIMEOUT_S):
                    await writer.wait_closed()
