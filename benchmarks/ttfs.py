"""TTFS: how soon each endpoint's client gets the final text of a turn, one stream and N at once.

A real ``streamwhisper serve`` process; each client streams eval read_en clips (one clip, one
turn) at real time over one protocol (N clients with the clips rotated, each starting a mean
turn's length over N after the one before it: ``--stagger``) and, per turn, measures:

- ``finalize`` (``commit``, ``audio-stop``): from the client's end-of-turn message (native
  ``finalize``, Deepgram ``Finalize``, Flux ``ForceEndTurn``, OpenAI Realtime
  ``input_audio_buffer.commit`` with manual turns, Wyoming ``audio-stop``) to the final text of
  the turn (Flux: its ``EndOfTurn``). The client sends it when its own
  VAD stops, ``--client-stop`` seconds (default 0.2, as in Pipecat's stt-benchmark) after the
  turn's last voiced frame (webrtcvad), the audio up to there sent first; ``--client-stop end``
  sends it right after the clip's last sample instead (read_en clips end 0.09 s after their last
  voiced frame at the median). A live client goes on sending the clip's rest, then silence, at
  real time while it waits (at most 15 s: a turn without its final is ``missing``). When the
  server's own endpoint ended the turn first (its final, holding the turn's last word, came
  before the finalize, which then has nothing to answer: docs/protocol.md), the turn counts 0 s
  and ``early`` (native and Flux; a Deepgram client cannot tell that final from a pause's);
- ``endpoint``: the client keeps sending silence; from the end of the turn's speech (its last
  voiced frame, when that audio was sent) to the final the server's own endpointing makes (a
  final later than 2.5 s is waited for, up to 15 s more, and timed; ``missing`` counts turns
  with none by then).

REST endpoints (OpenAI ``/v1/audio/transcriptions``, Deepgram ``POST /v1/listen``) have no live
turn: their TTFS is from the request's last byte to the answer, for the clip as a WAV file.
Prints one JSON line per (endpoint, mode, streams) and a table. Figures only, never asserts.

    .venv/bin/python benchmarks/ttfs.py                              # every endpoint, 1 and 8 streams
    .venv/bin/python benchmarks/ttfs.py --endpoint deepgram --streams 1 --limit 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import re
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit, shared_data_dir, table  # noqa: E402
from benchmarks.load import pct, start_server  # noqa: E402
from benchmarks.scoring import read_manifest  # noqa: E402
from benchmarks.ttfs_sessions import GAP_S, WYOMING, Turn, paced, realtime_turns, wyoming_turns  # noqa: E402
from benchmarks.ttfs_uploads import Clip, deepgram_rest_turns, openai_rest_turns  # noqa: E402
from streamwhisper.audio.convert import float32_to_pcm_s16le  # noqa: E402
from streamwhisper.audio.files import load_audio  # noqa: E402
from streamwhisper.bench import cpu_name, last_voiced_end  # noqa: E402

LastEnd = Callable[[dict], float | None]  # a final's last word end (stream seconds), or None
CHUNK = 1600  # 100 ms per message, as live clients send
ENDPOINT_WAIT_S = 2.5  # silence sent after a turn in endpoint mode before its messages are read
LATE_WAIT_S = 15.0  # ... and then more, 100 ms at a time, until the turn's final comes (at most)
EARLY_SLACK_S = 0.5  # a final ending this much before the client's end of speech holds the turn's last word


@dataclass(frozen=True)
class Live:
    """One live WebSocket protocol: its URL, end-of-turn and end-of-stream messages, which
    message answers a finalize, which is a final, the end of a final's last word, and which final
    ended an utterance at the server's own endpoint."""

    path: str
    finalize: str
    eof: str
    finalized: Callable[[dict], bool]
    final: Callable[[dict], bool]
    last_end: LastEnd
    ended: Callable[[dict], bool]  # the server's own endpoint ended an utterance with this final


async def live_turns(live: Live, base: str, clips: list[Clip], mode: str) -> list[float]:
    from websockets.asyncio.client import connect

    out: list[float] = []
    async with connect(base + live.path) as ws:
        arrivals: asyncio.Queue[tuple[float, dict]] = asyncio.Queue()

        async def read() -> None:
            async for text in ws:
                arrivals.put_nowait((time.monotonic(), json.loads(text)))

        reader = asyncio.create_task(read())
        clock = [0.0, time.monotonic()]
        for head, tail, speech_end in clips:
            turn, began = Turn(), clock[0]
            await paced(ws.send, float32_to_pcm_s16le(head), clock, turn)
            if mode == "finalize":  # the audio goes on at real time while the client waits
                asked = time.monotonic()
                await ws.send(live.finalize)
                final = asyncio.create_task(_finalized(live, arrivals, asked, began + speech_end))
                await paced(ws.send, float32_to_pcm_s16le(tail), clock, Turn())
                while not final.done():
                    await paced(ws.send, bytes(3200), clock, Turn())
                out.append(final.result())
            else:  # the client goes on sending silence; the server's own endpointing ends the turn
                await paced(ws.send, float32_to_pcm_s16le(tail), clock, turn)
                await paced(ws.send, bytes(int(ENDPOINT_WAIT_S * 32000)), clock, Turn())
                ended = turn.sent_at(began + speech_end)
                waited = _endpointed(live, arrivals, ended)
                for _ in range(round(LATE_WAIT_S * 10)):  # a late final is timed, not missed
                    if not math.isnan(waited):
                        break
                    await paced(ws.send, bytes(3200), clock, Turn())
                    waited = _endpointed(live, arrivals, ended)
                out.append(waited)
            await paced(ws.send, bytes(int(GAP_S * 32000)), clock, Turn())
        await ws.send(live.eof)
        reader.cancel()
    return out


async def _finalized(live: Live, arrivals: asyncio.Queue[tuple[float, dict]], asked: float, speech_end: float) -> float:
    """Seconds from ``asked`` (when the finalize was sent) to the final that answers it (NaN
    after ``LATE_WAIT_S``); 0 when the server's own endpoint ended the turn first, with a final
    holding its last word (ending at most ``EARLY_SLACK_S`` before ``speech_end``, the client's
    end of speech, on the stream's clock) that came before the finalize: the client had the
    turn's text when it ended the turn (the server's VAD, on the whole stream, can place the end
    of speech a few frames before the client's, which heard the clip alone)."""
    came: deque[tuple[float, dict]] = deque()  # what arrived before this was called
    while not arrivals.empty():
        came.append(arrivals.get_nowait())
    for at, message in came:
        end = live.last_end(message) if at < asked and live.ended(message) else None
        if end is not None and end >= speech_end - EARLY_SLACK_S:
            return 0.0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LATE_WAIT_S):
            while True:
                at, message = came.popleft() if came else await arrivals.get()
                if at >= asked and live.finalized(message):
                    return at - asked
    return float("nan")


def _endpointed(live: Live, arrivals: asyncio.Queue[tuple[float, dict]], speech_ended: float) -> float:
    """The turn's messages so far: from ``speech_ended`` (when the audio of its last voiced frame
    was sent) to the final holding its last word (the one whose last word ends latest; an
    endpoint's final, or an earlier one when every word was final before the endpoint)."""
    best: tuple[float, float] | None = None  # (last word end, arrival)
    while not arrivals.empty():
        at, message = arrivals.get_nowait()
        end = live.last_end(message) if live.final(message) else None
        if end is not None and (best is None or end > best[0]):
            best = (end, at)
    return float("nan") if best is None else best[1] - speech_ended


def _native_final(m: dict) -> bool:
    return m.get("type") == "final" and bool(m.get("endpoint"))


def _native_last_end(m: dict) -> float | None:
    return m["words"][-1]["end"] if m.get("words") else None


def _deepgram_last_end(m: dict) -> float | None:
    words = m["channel"]["alternatives"][0]["words"] if m.get("type") == "Results" else []
    return words[-1]["end"] if words else None


NATIVE = Live(
    "/v1/stream?sample_rate=16000&interim_results=false",
    '{"type":"finalize"}',
    '{"type":"eof"}',
    _native_final,
    lambda m: m.get("type") == "final",
    _native_last_end,
    _native_final,
)
# as LiveKit's plugin configures it (endpointing=25)
DEEPGRAM = Live(
    "/v1/listen?encoding=linear16&sample_rate=16000&punctuate=true&interim_results=true&endpointing=25",
    '{"type":"Finalize"}',
    '{"type":"CloseStream"}',
    lambda m: m.get("type") == "Results" and bool(m.get("from_finalize")),
    lambda m: m.get("type") == "Results" and bool(m.get("is_final")),
    _deepgram_last_end,
    # with endpointing=25 a pause's final is speech_final too: no message here tells the
    # server's own endpoint apart (UtteranceEnd needs utterance_end_ms), so no turn is early
    lambda m: False,
)


def _flux_last_end(m: dict) -> float | None:
    words = m.get("words") if m.get("type") == "TurnInfo" else None
    return words[-1]["end"] if words else None


# Deepgram Flux as LiveKit's STTv2 configures it by default (no eager ends of turn)
FLUX = Live(
    "/v2/listen?model=flux-general-en&encoding=linear16&sample_rate=16000",
    '{"type":"ForceEndTurn"}',
    '{"type":"CloseStream"}',
    lambda m: m.get("event") == "EndOfTurn",
    lambda m: m.get("event") == "EndOfTurn",
    _flux_last_end,
    lambda m: m.get("event") == "EndOfTurn",
)


#: endpoint -> (turn driver, modes it has)
ENDPOINTS: dict[str, tuple[Callable[[str, list[np.ndarray], str], Awaitable[list[float]]], tuple[str, ...]]] = {
    "native": (functools.partial(live_turns, NATIVE), ("finalize", "endpoint")),
    "deepgram": (functools.partial(live_turns, DEEPGRAM), ("finalize", "endpoint")),
    "deepgram-flux": (functools.partial(live_turns, FLUX), ("finalize", "endpoint")),
    "openai-rest": (openai_rest_turns, ("upload",)),
    "deepgram-rest": (deepgram_rest_turns, ("upload",)),
    "wyoming": (wyoming_turns, ("audio-stop",)),
    "openai-realtime": (realtime_turns, ("commit",)),
}


def split_turn(audio: np.ndarray, client_stop: float | None) -> Clip:
    """The clip up to where the client ends its turn (``client_stop`` s after its last voiced
    frame, silence added if the clip ends sooner; None: the clip's end), the rest, and where the
    speech ends (its last voiced frame)."""
    speech_end = last_voiced_end(audio)
    if client_stop is None:
        return audio, audio[:0], speech_end
    cut = round((speech_end + client_stop) * 16000)
    if cut > len(audio):
        audio = np.concatenate([audio, np.zeros(cut - len(audio), np.float32)])
    return audio[:cut], audio[cut:], speech_end


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


async def run(base: str, driver: Any, clips: list[Clip], mode: str, streams: int, stagger: float) -> list[float]:
    """``streams`` clients at once, each with the clips rotated (no two say the same at once),
    client ``i`` starting ``i * stagger`` seconds after the first."""

    async def client(i: int) -> list[float]:
        await asyncio.sleep(i * stagger)
        return await driver(base, clips[i:] + clips[:i], mode)  # type: ignore[no-any-return]

    results = await asyncio.gather(*map(client, range(streams)))
    return [t for r in results for t in r]


def auto_stagger(clips: list[Clip], streams: int) -> float:
    """One turn's mean length (its audio and the gap after it) over the clients: their turns end
    spread over time, as independent sessions' do. Without it, the rotated clients' last turns
    all end together (each has said every clip), which times one burst of ``streams``
    simultaneous turn ends as a tenth of the turns."""
    turn_s = float(np.mean([(len(head) + len(tail)) / 16000 for head, tail, _ in clips])) + GAP_S
    return turn_s / streams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", action="append", choices=sorted(ENDPOINTS), help="repeatable; default all")
    parser.add_argument("--streams", type=int, action="append", help="concurrent clients (repeatable; default 1 8)")
    parser.add_argument("--limit", type=int, default=20, help="read_en clips per client (default 20)")
    parser.add_argument("--server-arg", action="append", default=[], help="passed to streamwhisper serve")
    parser.add_argument("--server-log", metavar="FILE", help="run the server with -vv, its log in FILE")
    parser.add_argument(
        "--stagger",
        default="auto",
        metavar="S|auto",
        help="client i starts i*S seconds after the first (default auto: a mean turn over the clients; 0: all at once)",
    )
    parser.add_argument(
        "--client-stop",
        default="0.2",
        metavar="S|end",
        help="the client ends a turn S seconds after its last voiced frame (default 0.2), or at the clip's end",
    )
    args = parser.parse_args()
    stop = None if args.client_stop == "end" else float(args.client_stop)
    manifest = shared_data_dir() / "eval" / "manifest.tsv"
    clips = [split_turn(load_audio(c.wav), stop) for c in read_manifest(manifest, ["read_en"])[: args.limit]]
    proc, base, log = start_server([*args.server_arg, "--wyoming-port", "-1"], log_lines=2, log_path=args.server_log)
    found = re.search(r"tcp://(\S+)", log[1])
    if found is None:
        raise SystemExit(f"no Wyoming listener in the server's log: {log[1]!r}")
    WYOMING.append(found[1])
    rows = []
    try:
        for name in args.endpoint or list(ENDPOINTS):
            driver, modes = ENDPOINTS[name]
            for streams in args.streams or [1, 8]:
                for mode in modes:
                    stagger = auto_stagger(clips, streams) if args.stagger == "auto" else float(args.stagger)
                    times = asyncio.run(run(base, driver, clips, mode, streams, stagger))
                    ok = [t for t in times if t == t]
                    record = {
                        "endpoint": name,
                        "mode": mode,
                        "streams": streams,
                        "turns": len(times),
                        "missing": len(times) - len(ok),
                        "early": sum(t == 0.0 for t in ok),  # the server's endpoint ended the turn first
                        "ttfs_p50": round(_or_nan(pct(ok, 50)), 3),
                        "ttfs_p95": round(_or_nan(pct(ok, 95)), 3),
                        "client_stop": args.client_stop,
                        "stagger_s": round(stagger, 2),
                        "cpu": cpu_name(),
                    }
                    emit(record)
                    rows.append([name, mode, streams, len(ok), record["ttfs_p50"], record["ttfs_p95"]])
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(table(["endpoint", "mode", "streams", "turns", "p50 s", "p95 s"], rows), file=sys.stderr)


if __name__ == "__main__":
    main()
