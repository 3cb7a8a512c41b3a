"""Real ``streamwhisper serve`` processes and a real HAProxy on loopback, for the deployment test
(tests/test_deploy.py) and the deployment benchmark (benchmarks/drain.py).

:class:`Node` is one daemon process (its ports read from what it prints); :func:`haproxy_config`
is ``deploy/haproxy.cfg`` with its ``bind`` and ``server`` lines pointed at the nodes, everything
else as shipped; :class:`HAProxy` runs it. :func:`stream_moving` is a native-protocol client that
does what docs/deploy.md asks of clients: when its session ends with 1001 (``closed.reason ==
"shutdown"``), it opens a new session (through the balancer) and sends its audio on from
``closed.audio_seconds``, shifting the new session's times by that much.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
HAPROXY_CFG = REPO / "deploy" / "haproxy.cfg"
HAPROXY = "/usr/sbin/haproxy"
SR = 16_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Node:
    """``streamwhisper serve`` on 127.0.0.1, any free port, with the agent-check port on.

    ``env`` adds ``STREAMWHISPER_*`` settings (small ones keep a test cheap)."""

    def __init__(self, name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        environ = dict(os.environ, STREAMWHISPER_MODEL_THREADS="1", PYTHONPATH=str(REPO), **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamwhisper", "serve", "--port", "0", "--agent-port", "-1"],
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        self.lines: list[str] = []
        self._ports: dict[str, int] = {}
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)  # the pipe never fills
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if found := re.search(r"serving \S+ on ws://[^:]+:(\d+)/", line):
                self._ports["http"] = int(found[1])
            if found := re.search(r"agent check on tcp://[^:]+:(\d+)", line):
                self._ports["agent"] = int(found[1])
            if len(self._ports) == 2:
                self._ready.set()
        self._ready.set()  # the process ended

    def wait_ready(self, timeout: float = 120) -> None:
        if not self._ready.wait(timeout) or len(self._ports) < 2:
            raise RuntimeError(f"{self.name} did not start:\n{''.join(self.lines)}")

    @property
    def port(self) -> int:
        return self._ports["http"]

    @property
    def agent_port(self) -> int:
        return self._ports["agent"]

    def sigterm(self) -> float:
        """Send SIGTERM; returns when (time.monotonic)."""
        self.proc.send_signal(signal.SIGTERM)
        return time.monotonic()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def haproxy_config(port: int, nodes: list[Node]) -> str:
    """deploy/haproxy.cfg listening on 127.0.0.1:``port``, its servers being ``nodes``."""
    text = HAPROXY_CFG.read_text()
    text, bound = re.subn(r"(?m)^(\s*)bind :\d+$", rf"\g<1>bind 127.0.0.1:{port}", text)
    servers = "".join(f"    server {n.name} 127.0.0.1:{n.port} agent-port {n.agent_port}\n" for n in nodes)
    text, replaced = re.subn(r"(?m)(^\s*server \S+ .*\n)+", servers, text)
    if bound != 1 or replaced != 1:
        raise RuntimeError("deploy/haproxy.cfg: expected one bind line and one block of server lines")
    return text


class HAProxy:
    """HAProxy in the foreground on ``config``; ``url`` is its WebSocket frontend."""

    def __init__(self, config: str, workdir: Path) -> None:
        self.port = int(re.search(r"bind 127\.0\.0\.1:(\d+)", config)[1])  # type: ignore[index]
        path = workdir / "haproxy.cfg"
        path.write_text(config)
        check = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy -c: {check.stdout}{check.stderr}")
        self.log = open(workdir / "haproxy.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", str(path)], stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30) -> None:
        """Until a request through HAProxy reaches a daemon (/readyz answers 200)."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("HAProxy did not come up")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait()
        self.log.close()


@dataclass
class Leg:
    """One session of a moving client: where it ran and what it got."""

    node: str
    offset: float  # seconds of the client's audio before this session's first sample
    messages: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None

    @property
    def closed(self) -> dict[str, Any]:
        return self.messages[-1] if self.messages and self.messages[-1]["type"] == "closed" else {}


async def stream_moving(
    url: str, audio: np.ndarray, progress: asyncio.Event | None = None, at_s: float = 0.0, chunk_s: float = 0.1
) -> list[Leg]:
    """Stream ``audio`` at real time through ``url`` until ``eof`` is answered; a session closed
    by a shutdown (1001) is followed by a new one from its ``closed.audio_seconds`` (a 503 while
    every node is full is retried). ``progress`` is set once ``at_s`` seconds were sent."""
    from websockets.exceptions import ConnectionClosed

    from streamwhisper.audio.convert import float32_to_pcm_s16le

    legs: list[Leg] = []
    offset = 0.0
    step = int(chunk_s * SR)
    while True:
        async with await _connect(f"{url}/v1/stream") as ws:
            node = ws.response.headers.get("X-Streamwhisper-Node", "?") if ws.response else "?"
            leg = Leg(node, offset)
            legs.append(leg)

            async def send(start: int) -> None:
                began = time.monotonic()
                try:
                    for i in range(start, len(audio), step):
                        await ws.send(float32_to_pcm_s16le(audio[i : i + step]))
                        if progress is not None and (i + step) / SR >= at_s:
                            progress.set()
                        # real time: the chunk after this one is due when its audio would start
                        await asyncio.sleep(max(0.0, began + (i + step - start) / SR - time.monotonic()))
                    await ws.send(json.dumps({"type": "eof"}))
                except ConnectionClosed:
                    pass

            sender = asyncio.create_task(send(round(offset * SR)))
            try:
                async for text in ws:
                    leg.messages.append(json.loads(text))
            except ConnectionClosed:
                pass
            sender.cancel()
            leg.close_code = ws.close_code
        if leg.closed.get("reason") != "shutdown":
            return legs
        offset += leg.closed["audio_seconds"]


async def _connect(url: str, within_s: float = 60.0) -> Any:
    """Open a WebSocket as a client should: a 503 (every node full or lagging, HAProxy's answer)
    is retried with backoff, for at most ``within_s`` seconds."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    deadline, delay = time.monotonic() + within_s, 0.2
    while True:
        try:
            return await connect(url, max_size=None)
        except InvalidStatus as exc:
            if exc.response.status_code != 503 or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


def transcript(legs: list[Leg]) -> str:
    """The finals of every leg, in order: the client's whole transcript."""
    return " ".join(m["text"] for leg in legs for m in leg.messages if m["type"] == "final" and m["text"])
