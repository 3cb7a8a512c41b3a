"""The HAProxy agent-check port: free capacity as a weight, 0 % when full, ``drain`` while the
daemon shuts down (the real daemon, the fake recogniser, a clock the test moves)."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import numpy as np
import pytest
from runtime_fakes import (
    SR,
    TimedRecognizer,
    is_partial,
    on_clock_loop,
    read_to_close,
    read_until,
    recv_json,
    running_daemon,
    send_audio,
    stream_url,
)
from websockets.asyncio.client import connect

from streamwhisper.errors import ConfigError
from streamwhisper.runtime.agent_check import agent_reply
from streamwhisper.runtime.config import ServerConfig
from streamwhisper.runtime.server import Daemon


async def ask_agent(daemon: Daemon | int) -> str:
    """What HAProxy reads: one line, then the daemon closes the connection."""
    port = daemon if isinstance(daemon, int) else daemon.agent_port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return (await reader.read()).decode()
    finally:
        writer.close()


async def readyz(daemon: Daemon) -> tuple[int, dict]:
    def get() -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/readyz", timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    return await asyncio.to_thread(get)


def test_the_reply_is_the_free_share_of_max_sessions() -> None:
    assert agent_reply(16, 16, False) == "ready 100%\n"
    assert agent_reply(3, 4, False) == "ready 75%\n"
    assert agent_reply(1, 300, False) == "ready 1%\n", "a free session is never rounded to 0"
    assert agent_reply(0, 4, False) == "ready 0%\n"
    assert agent_reply(4, 4, True) == "drain\n"


def test_the_port_is_off_by_default_and_validated() -> None:
    assert ServerConfig().agent_port == 0
    with pytest.raises(ConfigError, match="agent_port"):
        ServerConfig(agent_port=70000)


@on_clock_loop
async def test_the_agent_follows_the_sessions_and_readyz_and_says_drain_while_shutting_down(
    jfk_audio: np.ndarray,
) -> None:
    recognizer = TimedRecognizer()
    try:
        async with running_daemon(recognizer, agent_port=-1, max_sessions=2) as daemon:
            assert await ask_agent(daemon) == "ready 100%\n"
            first = await connect(stream_url(daemon))
            await recv_json(first)
            assert await ask_agent(daemon) == "ready 50%\n"
            second = await connect(stream_url(daemon))
            await recv_json(second)
            assert await ask_agent(daemon) == "ready 0%\n", "full: no new connection for this node"
            status, state = await readyz(daemon)
            assert status == 503 and state["free"] == 0
            await second.send(json.dumps({"type": "eof"}))
            await read_to_close(second)
            await send_audio(first, jfk_audio[: 3 * SR])
            await read_until(first, is_partial)
            recognizer.hold()  # the session's last request waits: the shutdown is under way
            await send_audio(first, jfk_audio[3 * SR : 4 * SR])
            await asyncio.to_thread(recognizer.entered.wait)
            port = daemon.agent_port
            shutdown = asyncio.create_task(daemon.shutdown())
            await daemon.ctx.shutdown.wait()
            assert await ask_agent(daemon) == "drain\n"
            recognizer.release()
            await read_to_close(first)
            await shutdown
            with pytest.raises(OSError):  # closed with the daemon
                await ask_agent(port)
    finally:
        recognizer.release()
