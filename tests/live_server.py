"""A real daemon on port 0, running on its own event loop in a background thread."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as sync_connect

from streamwhisper.config import Config
from streamwhisper.model.cpu_threads import core_sharing
from streamwhisper.model.serving import WhisperRecognizer
from streamwhisper.runtime.config import inference_threads
from streamwhisper.runtime.server import Daemon

T = TypeVar("T")


class LiveServer:
    """``with LiveServer(model, max_sessions=2) as server: ... server.url ...``

    Keyword arguments override ``[server]`` settings; ``streaming=`` replaces the streaming config;
    ``name`` is the model's name the daemon reports; ``loop`` the event loop to run it on (a
    runtime_fakes.ClockLoop lets the test move its timers on); ``wrap`` puts a recogniser of the
    test's around the real one (a fault injected at the Recognizer seam).
    """

    def __init__(
        self,
        model: Any,
        streaming: Any = None,
        name: str = "tiny.en",
        loop: Any = None,
        wrap: Any = None,
        **server: Any,
    ) -> None:
        base = Config()
        config = dataclasses.replace(
            base,
            streaming=streaming or base.streaming,
            server=dataclasses.replace(base.server, port=0, **server),
        )
        self.daemon_config = config
        self._model = model
        self._name = name
        self._wrap = wrap or (lambda recognizer: recognizer)
        self._loop = loop or asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="live-server", daemon=True)
        self.daemon: Daemon | None = None

    def __enter__(self) -> LiveServer:
        self._thread.start()

        async def start() -> Daemon:
            config = self.daemon_config
            recognizer = self._wrap(WhisperRecognizer(self._model))
            sharing = core_sharing(inference_threads(config.server.workers), config.model.threads)  # as serve does
            daemon = Daemon(
                config.server, config.streaming, recognizer, self._name, clock=self._loop.time, on_share=sharing
            )
            await daemon.start()
            return daemon

        self.daemon = self.call(start())
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def shutdown(self) -> None:
        assert self.daemon is not None
        self.call(self.daemon.shutdown(), timeout=120)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine on the server's loop and wait for its result."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    def inspect(self, fn: Any) -> Any:
        """Call ``fn(daemon)`` on the server's loop (reading its state safely)."""

        async def run() -> Any:
            return fn(self.daemon)

        return self.call(run())

    def inspect_pumps(self, fn: Any) -> Any:
        """Call ``fn(pumps)`` on the server's loop with the pumps of its sessions (those that have one)."""
        return self.inspect(lambda daemon: fn([s.stream.pump for s in daemon.ctx.sessions if s.stream.pump]))

    @property
    def port(self) -> int:
        assert self.daemon is not None
        return self.daemon.port

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def wait_until(condition: Any, timeout: float, what: str) -> Any:
    """Poll ``condition()`` until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: still not true after {timeout} s")
        time.sleep(0.1)
    return value


def raw_session(url: str, token: str, send: list[str | bytes]) -> tuple[list[dict], int | None]:
    """A plain websockets client of a compatible protocol (``url`` with its path and query;
    Deepgram's ``Authorization: Token``): send, then read every message until the close."""
    with sync_connect(url, additional_headers={"Authorization": f"Token {token}"}) as ws:
        for item in send:
            ws.send(item)
        messages = []
        try:
            while True:
                messages.append(json.loads(ws.recv(timeout=60)))
        except ConnectionClosed:
            pass
        return messages, ws.close_code
