"""Resume with the real model: seeded cuts of a real connection mid-utterance (a reset, and a
network gone silent that the server notices by its keepalive), and a daemon killed with SIGKILL
and restarted. The comparison with an uninterrupted run is ``benchmarks/resume.py``'s."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys

import pytest
from live_server import LiveServer
from runtime_fakes import ClockLoop

from benchmarks.resume import Run, best_match, cut_runs, replayed
from benchmarks.scoring import Clip, word_error_rate
from streamwhisper.audio.files import load_audio
from streamwhisper.client import Closed, StreamClient
from streamwhisper.events import Final
from streamwhisper.model.serving import WhisperRecognizer

pytestmark = pytest.mark.slow  # end to end: the real model

RUNS = 20


@pytest.fixture(scope="module")
def simulated_baselines(serving_model, clips: dict[str, Clip]) -> list[Run]:
    """Uninterrupted runs of en_jfk replayed on simulated schedules (see benchmarks/resume.py)."""
    return replayed(WhisperRecognizer(serving_model), load_audio(clips["en_jfk"].wav))


@pytest.mark.parametrize("mode", ["close", "stall"])
def test_seeded_cuts_lose_and_duplicate_no_word(
    serving_model, clips: dict[str, Clip], simulated_baselines: list[Run], mode: str
) -> None:
    clip = clips["en_jfk"]
    audio = load_audio(clip.wav)
    with LiveServer(serving_model, loop=ClockLoop(), idle_timeout_s=0) as server:
        live, runs = asyncio.run(cut_runs(server, audio, range(RUNS), (mode,)))
        resumed = server.daemon.metrics.resumes.labels("resumed")._value.get()
    assert min(word_error_rate([clip.reference], [" ".join(b.words)]) for b in live) <= 0.1
    baselines = live + simulated_baselines
    assert resumed == RUNS and all(r.resumed == [True] for r in runs), [r.resumed for r in runs]
    for run in runs:
        comparison = best_match(baselines, run)  # equal to an uninterrupted run outside the cut's window
        assert comparison.outside == [], f"cut at {run.cut_s:.2f} s"
        assert (comparison.duplicated, comparison.lost) == (0, 0), f"cut at {run.cut_s:.2f} s: {run.words}"


def start_daemon(port: int = 0) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, STREAMWHISPER_SERVER_PORT=str(port), STREAMWHISPER_MODEL_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamwhisper", "serve"], stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"ws://\S+:(\d+)/v1/stream", line)
    assert found, line
    return proc, int(found[1])


def test_after_kill_9_the_client_is_refused_its_token_and_loses_no_audio(clips: dict[str, Clip]) -> None:
    """SIGKILL mid-stream: what the daemon held in flight is gone; the client, refused its token by
    the restarted daemon, starts a new session and sends again the audio after its last final."""
    clip = clips["en_jfk"]
    audio = load_audio(clip.wav)
    proc, port = start_daemon()
    restarted: list[subprocess.Popen[str]] = []

    async def run() -> list[object]:
        messages: list[object] = []
        async with StreamClient.connect(f"ws://127.0.0.1:{port}", interim_results=False) as client:

            async def read() -> None:
                async for message in client:
                    messages.append(message)

            reader = asyncio.create_task(read())
            for i in range(0, len(audio), 1600):
                if i == 6 * 16000:
                    while not any(isinstance(m, Final) and m.words for m in messages):  # noqa: ASYNC110
                        await asyncio.sleep(0.05)  # a final before the kill: the new session goes on after it
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    restarted.append(start_daemon(port)[0])
                await client.send_audio(audio[i : i + 1600])
                await asyncio.sleep(0.025)
            await client.eof()
            await reader
            assert [r.resumed for r in client.reconnects] == [False]
        return messages

    try:
        messages = asyncio.run(run())
    finally:
        for p in [proc, *restarted]:
            p.kill()
            p.wait()
            assert p.stderr is not None
            p.stderr.close()
    finals = [m for m in messages if isinstance(m, Final)]
    text = " ".join(f.text for f in finals)
    assert word_error_rate([clip.reference], [text]) <= 0.2, text
    ends = [w.end for f in finals for w in f.words]
    assert ends == sorted(ends) and ends[-1] > 10.0, "times go on across the two sessions"
    closed = messages[-1]
    assert isinstance(closed, Closed) and closed.audio_seconds == pytest.approx(len(audio) / 16000, abs=0.05)
