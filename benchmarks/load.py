"""Concurrent-load benchmark: a real `streamwhisper serve` process and N real clients.

Each client streams its own real speech (eval read_en clips, 1 s apart, rotated so that no two
clients say the same thing at the same time) at real time over the native protocol. For each N
it prints final and partial latency p50/p95 (per word: from sending the audio of the word's end
to receiving it; ``agreed_*``: the words final before their utterance's endpoint, committed when
two hypotheses agree, and their share of all words), TTFS with the server's own endpointing
(from sending the end of an utterance's last word to receiving the endpoint final that holds
it), WER, the server's CPU use and peak RSS, and refused sessions (with ``--alone``, also the
WER of the same programmes streamed one at a time: the cost of load is the difference); then
the largest N whose p95 final latency is at most 3 s. Figures only, never asserts.

    .venv/bin/python benchmarks/load.py                       # N = 1 2 4 8 12 16, 60 s each
    .venv/bin/python benchmarks/load.py --clients 8 --seconds 30
    .venv/bin/python benchmarks/load.py --clients 8 --alone    # and the same 8 streams one by one
    .venv/bin/python benchmarks/load.py --hour --speed 4      # RSS over one hour of audio
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import shared_data_dir  # noqa: E402
from benchmarks.scoring import read_manifest, word_error_rate  # noqa: E402
from streamwhisper.audio.files import load_audio  # noqa: E402
from streamwhisper.bench import cpu_name  # noqa: E402
from streamwhisper.client import StreamClient  # noqa: E402
from streamwhisper.events import Final, Partial  # noqa: E402

MANIFEST = shared_data_dir() / "eval" / "manifest.tsv"


def start_server(
    extra: list[str], log_lines: int = 1, log_path: str | None = None
) -> tuple[subprocess.Popen[str], str, list[str]]:
    """A `streamwhisper serve` process on a free port: (process, its ws:// URL, the first
    ``log_lines`` lines it logged from the URL's line on). ``log_path``: run it with ``-vv``
    and write its whole debug log there."""
    env = dict(os.environ, STREAMWHISPER_SERVER_PORT="0", STREAMWHISPER_SERVER_MAX_SESSIONS="32")
    verbose = ["-vv"] if log_path else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamwhisper", *verbose, "serve", *extra], stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    log = open(log_path, "w", buffering=1) if log_path else None  # noqa: SIM115 (open while it runs)
    found: re.Match[str] | None = None
    skipped: list[str] = []
    while found is None and len(skipped) < 1000 and (line := proc.stderr.readline()):
        found = re.search(r"(ws://\S+)/v1/stream", line)
        skipped.append(line)
    if not found:
        proc.kill()
        raise SystemExit(f"server did not start: {''.join(skipped)}{proc.stderr.read()}")
    lines = [skipped[-1], *(proc.stderr.readline() for _ in range(log_lines - 1))]
    if log is not None:
        log.writelines([*skipped, *lines[1:]])

    def drain(stream: IO[str]) -> None:  # keep reading its log (into log_path, if any)
        for line in stream:
            if log is not None:
                log.write(line)

    threading.Thread(target=drain, args=(proc.stderr,), daemon=True).start()
    return proc, found[1], lines


def programme(clips: list, offset: int, seconds: float) -> tuple[np.ndarray, str]:
    """About ``seconds`` of speech: clips from ``offset`` on, with 1 s of silence between."""
    parts, refs, total, i = [], [], 0.0, offset
    gap = np.zeros(16000, dtype=np.float32)
    while total < seconds:
        clip = clips[i % len(clips)]
        audio = load_audio(clip.wav)
        parts += [audio, gap]
        refs.append(clip.reference)
        total += len(audio) / 16000 + 1.0
        i += 1
    return np.concatenate(parts), " ".join(refs)


async def client(url: str, audio: np.ndarray, speed: float, out: dict) -> None:
    sent_at: list[tuple[float, float]] = []  # (audio seconds sent, monotonic)
    finals: list[str] = []
    final_lat: list[float] = []
    agreed_lat: list[float] = []  # words of finals before the endpoint (committed by agreement)
    partial_lat: list[float] = []
    ttfs: list[float] = []

    def when_sent(t: float) -> float:
        for audio_s, wall in sent_at:
            if audio_s >= t - 1e-6:
                return wall
        return sent_at[-1][1]

    try:
        async with StreamClient.connect(url, sample_rate=16000) as c:

            async def read() -> None:
                async for m in c:
                    now = time.monotonic()
                    if isinstance(m, Final):
                        finals.append(m.text)
                        latencies = [now - when_sent(w.end) for w in m.words]
                        final_lat.extend(latencies)
                        if not m.endpoint:
                            agreed_lat.extend(latencies)
                        if m.endpoint and m.words:
                            ttfs.append(now - when_sent(m.words[-1].end))
                    elif isinstance(m, Partial) and m.words:
                        partial_lat.append(now - when_sent(m.end))

            reader = asyncio.create_task(read())
            began = time.monotonic()
            step = 1600
            for i in range(0, len(audio), step):
                await c.send_audio(audio[i : i + step])
                sent_at.append((min(i + step, len(audio)) / 16000, time.monotonic()))
                await asyncio.sleep(max(0.0, began + (i + step) / 16000 / speed - time.monotonic()))
            await c.eof()
            await reader
    except ConnectionError as exc:
        out["refused"] = str(exc)
        return
    out.update(text=" ".join(finals), final=final_lat, agreed=agreed_lat, partial=partial_lat, ttfs=ttfs)


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def watch(pid: int, stop: threading.Event, out: dict) -> None:
    proc = psutil.Process(pid)
    peak = 0
    samples = []
    began = time.monotonic()
    while not stop.wait(0.5):
        rss = proc.memory_info().rss
        peak = max(peak, rss)
        samples.append((round(time.monotonic() - began, 1), round(rss / 2**20)))
    out["peak_rss_mb"] = round(peak / 2**20)
    out["rss_samples"] = samples


def run_level(url: str, pid: int, streams: list[tuple[np.ndarray, str]], speed: float) -> dict:
    """Stream ``streams`` (programmes: audio, reference) at once and measure."""
    n = len(streams)
    outs: list[dict] = [{} for _ in range(n)]
    proc = psutil.Process(pid)
    cpu0 = proc.cpu_times()
    stop, mem = threading.Event(), {}
    watcher = threading.Thread(target=watch, args=(pid, stop, mem))
    watcher.start()
    began = time.monotonic()

    async def all_clients() -> None:
        await asyncio.gather(*(client(url, a, speed, o) for (a, _), o in zip(streams, outs, strict=True)))

    asyncio.run(all_clients())
    wall = time.monotonic() - began
    stop.set()
    watcher.join()
    cpu1 = proc.cpu_times()
    served = [(o, ref) for o, (_, ref) in zip(outs, streams, strict=True) if "refused" not in o]
    finals = [x for o, _ in served for x in o["final"]]
    agreed = [x for o, _ in served for x in o["agreed"]]
    partials = [x for o, _ in served for x in o["partial"]]
    ttfs = [x for o, _ in served for x in o["ttfs"]]
    wer = word_error_rate([r for _, r in served], [o["text"] for o, _ in served]) if served else None
    return {
        "clients": n,
        "refused": n - len(served),
        "audio_s_per_client": round(len(streams[0][0]) / 16000, 1),
        "final_p50": pct(finals, 50),
        "final_p95": pct(finals, 95),
        "agreed_share": round(len(agreed) / len(finals), 3) if finals else None,
        "agreed_p50": pct(agreed, 50),
        "agreed_p95": pct(agreed, 95),
        "partial_p50": pct(partials, 50),
        "partial_p95": pct(partials, 95),
        "endpoint_ttfs_p50": pct(ttfs, 50),
        "endpoint_ttfs_p95": pct(ttfs, 95),
        "wer": None if wer is None else round(wer, 4),
        "cpu_percent": round(100 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / wall),
        "peak_rss_mb": mem["peak_rss_mb"],
        "rss_samples": mem["rss_samples"],
        "cpu": cpu_name(),
        "texts": [(ref, o["text"]) for o, ref in served],
    }


def alone_wer(url: str, pid: int, streams: list[tuple[np.ndarray, str]], speed: float) -> float:
    """WER of the same programmes each streamed with no other client: what load costs is the
    difference (the programmes differ in difficulty, so one stream's WER is no baseline)."""
    texts = [t for s in streams for t in run_level(url, pid, [s], speed)["texts"]]
    return round(word_error_rate([r for r, _ in texts], [h for _, h in texts]), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16])
    parser.add_argument("--seconds", type=float, default=60.0, help="audio per client")
    parser.add_argument("--speed", type=float, default=1.0, help="x real time")
    parser.add_argument("--hour", action="store_true", help="one client, one hour of audio: RSS over time")
    parser.add_argument("--json", action="store_true", help="one JSON object per level")
    parser.add_argument(
        "--alone", action="store_true", help="also stream each level's programmes one at a time: wer_alone"
    )
    parser.add_argument("--server-log", metavar="FILE", help="run the server with -vv, its log in FILE")
    parser.add_argument("server_args", nargs="*", help="extra `serve` flags (e.g. --model base)")
    args = parser.parse_args()
    clips = [c for c in read_manifest(MANIFEST, ["read_en"]) if c.seconds >= 2.5]
    proc, url, _ = start_server(args.server_args, log_path=args.server_log)
    try:
        if args.hour:
            args.clients, args.seconds = [1], 3600.0
        levels = []
        for n in args.clients:
            streams = [programme(clips, 7 * k, args.seconds) for k in range(n)]
            result = run_level(url, proc.pid, streams, args.speed)
            del result["texts"]  # (for alone_wer; not a figure)
            if args.alone and n > 1:
                result["wer_alone"] = alone_wer(url, proc.pid, streams, args.speed)
            levels.append(result)
            if args.json:
                print(json.dumps(result), flush=True)
            else:
                shown = {k: v for k, v in result.items() if k != "rss_samples"}
                print(" ".join(f"{k}={v}" for k, v in shown.items()), flush=True)
            if args.hour:
                samples = result["rss_samples"]
                print("rss_mb over time:", samples[:: max(len(samples) // 30, 1)], flush=True)
        ok = [r["clients"] for r in levels if r["final_p95"] is not None and r["final_p95"] <= 3.0 and not r["refused"]]
        print(f"largest N with p95 final latency <= 3 s: {max(ok) if ok else 0}", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
