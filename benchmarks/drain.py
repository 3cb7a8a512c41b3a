"""Deployment figures (docs/deploy.md), each on real ``streamwhisper serve`` processes (tiny.en):

* ``drain``: 16 sessions stream faster than real time (the worker saturated), then SIGTERM; the
  time from SIGTERM to the process' exit, and whether every session got ``closed`` and 1001.
* ``flood``: two live sessions stream real speech at real time; their final latency (a final
  word's arrival minus when its audio was sent) before and during a burst of 10x
  ``max_sessions`` simultaneous connection attempts from another process (admitted ones stay
  open, idle, for 5 s), how the burst was answered, and how much the server's RSS grew.
* ``two-nodes``: two daemons behind deploy/haproxy.cfg, 8 clients, one node SIGTERMed mid-stream
  (the scenario of tests/test_deploy.py): the session spread, and words lost or added by the
  moved clients against clients never moved.

Run from the repository root (needs /usr/sbin/haproxy for ``two-nodes``)::

    python benchmarks/drain.py                 # all three
    python benchmarks/drain.py drain flood     # some
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from benchmarks.cluster import SR, HAProxy, Node, free_port, haproxy_config, stream_moving, transcript  # noqa: E402

CLIP = Path(__file__).resolve().parents[1] / "tests" / "data" / "audio" / "en_jfk.flac"


def load(path: Path) -> np.ndarray:
    from streamwhisper.audio.files import load_audio

    return np.asarray(load_audio(str(path)), dtype=np.float32)


def readyz(port: int) -> bytes:
    """The body of /readyz (503, not ready, while every session is in use)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
            return bytes(r.read())
    except urllib.error.HTTPError as e:
        return bytes(e.read())


def p95(values: list[float]) -> float:
    return float(np.percentile(values, 95)) if values else float("nan")


async def timed_session(url: str, audio: np.ndarray, speed: float, sent_s: asyncio.Event | None = None) -> dict:
    """One native session sending ``audio`` at ``speed`` x real time, then no eof (the caller
    ends it) or eof; returns its messages, close code and each final word's latency."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from streamwhisper.audio.convert import float32_to_pcm_s16le

    out: dict = {"messages": [], "latencies": []}
    async with connect(f"{url}/v1/stream", max_size=None) as ws:
        began = time.monotonic()
        step = SR // 10

        async def send() -> None:
            try:
                for i in range(0, len(audio), step):
                    await ws.send(float32_to_pcm_s16le(audio[i : i + step]))
                    await asyncio.sleep(max(0.0, began + (i + step) / SR / speed - time.monotonic()))
                if sent_s is not None:
                    sent_s.set()
                else:
                    await ws.send(json.dumps({"type": "eof"}))
            except ConnectionClosed:
                pass

        sender = asyncio.create_task(send())
        try:
            async for text in ws:
                m = json.loads(text)
                out["messages"].append(m)
                if m["type"] == "final":
                    now = time.monotonic()
                    for w in m.get("words", []):
                        out["latencies"].append(now - (began + w["end"] / speed))
        except ConnectionClosed:
            pass
        sender.cancel()
        out["code"] = ws.close_code
    return out


def bench_drain(audio: np.ndarray) -> None:
    node = Node("drain", {"STREAMWHISPER_SERVER_MAX_SESSIONS": "16"})
    try:
        node.wait_ready()
        url = f"ws://127.0.0.1:{node.port}"

        async def run() -> tuple[list[dict], float, float]:
            sent = [asyncio.Event() for _ in range(16)]
            clip = np.concatenate([audio, audio])  # 22 s each, sent at 4x real time
            tasks = [asyncio.create_task(timed_session(url, clip, 4.0, e)) for e in sent]
            for e in sent:
                await e.wait()
            lag = json.loads(await asyncio.to_thread(readyz, node.port))["mean_lag_s"]
            t0 = node.sigterm()
            results = await asyncio.gather(*tasks)
            await asyncio.to_thread(node.proc.wait)
            return results, time.monotonic() - t0, lag

        results, took, lag = asyncio.run(run())
    finally:
        node.stop()
    codes = Counter(r["code"] for r in results)
    closed = sum(1 for r in results if r["messages"] and r["messages"][-1].get("reason") == "shutdown")
    print(f"drain: 16 sessions, mean lag at SIGTERM {lag:.1f} s (worker saturated), SIGTERM to exit {took:.2f} s")
    print(f"drain: close codes {dict(codes)}, closed(shutdown) sent to {closed}/16, shutdown_timeout_s 30")


async def burst(url: str, n: int, hold_s: float) -> list[tuple[str, float]]:
    """``n`` simultaneous connection attempts; each one's answer (``admitted`` or the refusal's
    code) and how long it took. Admitted sessions stay open, idle, for ``hold_s``."""
    from websockets.asyncio.client import connect

    async def attempt() -> tuple[str, float]:
        t = time.monotonic()
        try:
            async with connect(f"{url}/v1/stream") as ws:
                first = json.loads(await ws.recv())
                took = time.monotonic() - t
                if first["type"] != "ready":
                    return first.get("code", "?"), took
                await asyncio.sleep(hold_s)
                await ws.send(json.dumps({"type": "eof"}))
                return "admitted", took
        except Exception as exc:  # a connection the server or the OS refused
            return type(exc).__name__, time.monotonic() - t

    return await asyncio.gather(*(attempt() for _ in range(n)))


def bench_flood(audio: np.ndarray) -> None:
    import psutil

    max_sessions = 16
    node = Node("flood", {"STREAMWHISPER_SERVER_MAX_SESSIONS": str(max_sessions)})
    try:
        node.wait_ready()
        url = f"ws://127.0.0.1:{node.port}"
        server = psutil.Process(node.proc.pid)

        async def run() -> tuple[list[float], list[float], list[tuple[str, float]], int]:
            before = await asyncio.gather(*(timed_session(url, audio, 1.0) for _ in range(2)))
            rss = server.memory_info().rss
            live = [asyncio.create_task(timed_session(url, audio, 1.0)) for _ in range(2)]
            await asyncio.sleep(2.0)  # the live sessions are under way
            # the burst from another process, so that this one's loop only times the live sessions
            flood = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--burst", url, str(10 * max_sessions), stdout=asyncio.subprocess.PIPE
            )
            out, _ = await flood.communicate()
            peak = max(rss, server.memory_info().rss)
            during = await asyncio.gather(*live)
            answers = [(kind, float(t)) for kind, t in json.loads(out)]
            return (
                [x for r in before for x in r["latencies"]],
                [x for r in during for x in r["latencies"]],
                answers,
                peak - rss,
            )

        before, during, answers, grown = asyncio.run(run())
    finally:
        node.stop()
    kinds = Counter(kind for kind, _ in answers)
    refused = [t for kind, t in answers if kind != "admitted"]
    print(f"flood: live final-word latency p95 {p95(before):.2f} s before, {p95(during):.2f} s during the burst")
    print(
        f"flood: {len(answers)} simultaneous attempts (2 live sessions open): {dict(kinds)}; refusals answered "
        f"in at most {max(refused, default=float('nan')):.2f} s; server RSS grew {grown / 2**20:.0f} MB"
    )


def bench_two_nodes() -> None:
    import jiwer

    from benchmarks.scoring import normalize
    from tests.conftest import joined

    audio, reference = joined(("en_ls_dev_1272-141231-0002", "en_ls_dev_2412-153948-0000"), 0.5)
    env = {"STREAMWHISPER_SERVER_MAX_SESSIONS": "8", "STREAMWHISPER_SERVER_WEB_PAGE": "false"}
    nodes = [Node("node1", env), Node("node2", env)]
    proxy = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for n in nodes:
                n.wait_ready()
            proxy = HAProxy(haproxy_config(free_port(), nodes), Path(tmp))
            proxy.wait_ready()

            async def run() -> list:
                progress = [asyncio.Event() for _ in range(8)]
                tasks = [asyncio.create_task(stream_moving(proxy.url, audio, p, at_s=8.0)) for p in progress]
                for p in progress:
                    await p.wait()
                nodes[0].sigterm()
                return await asyncio.gather(*tasks)

            results = asyncio.run(run())
        finally:
            if proxy is not None:
                proxy.stop()
            for n in nodes:
                n.stop()

    def errors(legs: list) -> tuple[int, int]:
        out = jiwer.process_words(normalize(reference), normalize(transcript(legs)))
        return out.deletions, out.insertions

    spread = Counter(legs[0].node for legs in results)
    moved = [errors(legs) for legs in results if len(legs) > 1]
    stayed = [errors(legs) for legs in results if len(legs) == 1]
    print(f"two-nodes: sessions per node at start {dict(spread)}; moved after SIGTERM of node1: {len(moved)}")
    print(f"two-nodes: words deleted/inserted vs the reference, moved clients {moved}, never moved {stayed}")
    lost = sum(d for d, _ in moved) - len(moved) * (max(d for d, _ in stayed) if stayed else 0)
    print(f"two-nodes: words lost by the move (moved deletions beyond the worst unmoved client): {max(lost, 0)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", nargs="*", default=["drain", "flood", "two-nodes"])
    parser.add_argument("--burst", nargs=2, metavar=("URL", "N"), help=argparse.SUPPRESS)  # flood's other process
    args = parser.parse_args()
    if args.burst:
        print(json.dumps(asyncio.run(burst(args.burst[0], int(args.burst[1]), hold_s=5.0))))
        return
    audio = load(CLIP)
    if "drain" in args.which:
        bench_drain(audio)
    if "flood" in args.which:
        bench_flood(audio)
    if "two-nodes" in args.which:
        bench_two_nodes()


if __name__ == "__main__":
    main()
