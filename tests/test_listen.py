"""``streamwhisper listen`` end to end: real speech through the microphone callback path, real model.

Only the sounddevice boundary is replaced: :class:`FilePlayingInputStream` stands in for
``sounddevice.InputStream`` and plays the jfk clip, resampled to 44.1 or 48 kHz, through the
callback from its own thread, as PortAudio would. The no-device and --list-devices tests run the
real sounddevice on this machine (which has no sound card).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from live_server import LiveServer

from benchmarks.scoring import Clip, word_error_rate
from streamwhisper import cli
from streamwhisper.audio.convert import resample
from streamwhisper.listen import mic
from streamwhisper.listen.captions import CLEAR_LINE
from streamwhisper.listen.mic import NO_INPUT_DEVICE, NO_INPUT_DEVICES, MicSource, format_devices, input_devices

SRT_CUE = re.compile(r"(\d+)\n(\d\d):(\d\d):(\d\d),(\d\d\d) --> (\d\d):(\d\d):(\d\d),(\d\d\d)\n(.+)")
VTT_CUE = re.compile(r"(?:(\d\d):)?(\d\d):(\d\d)\.(\d\d\d) --> (?:(\d\d):)?(\d\d):(\d\d)\.(\d\d\d)\n(.+)")


class FilePlayingInputStream:
    """``sounddevice.InputStream`` played from an array: the callback runs on a thread of its own.

    Blocks go out at ``speed`` x real time (0: as fast as possible) in one reused buffer, as
    PortAudio reuses its own. At the end of the audio the stream finishes (``then="finish"``:
    the finished callback, as after ``sounddevice.CallbackStop``) or the process gets SIGINT
    (``then="interrupt"``: Ctrl-C while the stream keeps running without new audio).
    """

    def __init__(
        self,
        audio: np.ndarray,
        rate: int,
        *,
        speed: float,
        then: str,
        block: int = 1024,
        device: Any = None,
        samplerate: float | None = None,
        channels: int = 1,
        dtype: str = "float32",
        callback: Callable[..., None],
        finished_callback: Callable[[], None] | None = None,
    ) -> None:
        assert (device, samplerate, channels, dtype) == (None, None, 1, "float32"), "open the default device natively"
        self.samplerate = float(rate)
        self._audio, self._speed, self._then, self._block = audio, speed, then, block
        self._callback, self._finished = callback, finished_callback
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._play, name="fake-portaudio")
        self.closed = False

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()

    def close(self) -> None:
        self.closed = True

    def join(self) -> None:
        self._thread.join()

    def _play(self) -> None:
        buffer = np.zeros((self._block, 1), dtype=np.float32)
        began = time.monotonic()
        for i in range(0, len(self._audio), self._block):
            chunk = self._audio[i : i + self._block]
            buffer[: len(chunk), 0] = chunk
            if self._speed > 0 and self._stopping.wait(
                max(0.0, began + i / self.samplerate / self._speed - time.monotonic())
            ):
                return
            if self._stopping.is_set():
                return
            self._callback(buffer, len(chunk), None, "")
        if self._then == "finish":
            if self._finished is not None:
                self._finished()
        elif self._then == "interrupt":
            os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture(scope="module")
def jfk(clips: dict[str, Clip]) -> Clip:
    return clips["en_jfk"]


@pytest.fixture(scope="module")
def jfk_16k(jfk: Clip) -> np.ndarray:
    from streamwhisper.audio.files import load_audio

    return load_audio(jfk.wav)


def use_microphone(monkeypatch: pytest.MonkeyPatch, audio_16k: np.ndarray, rate: int, **kwargs: Any) -> None:
    """Make the default input device play ``audio_16k`` at ``rate`` Hz (the only thing replaced)."""
    audio = resample(audio_16k, 16000, rate)
    monkeypatch.setattr(
        mic, "default_input_stream_factory", lambda: functools.partial(FilePlayingInputStream, audio, rate, **kwargs)
    )


def use_model(monkeypatch: pytest.MonkeyPatch, model: Any) -> list[str]:
    """The CLI loads the session's real model instead of loading it again; returns what it asked for."""
    asked: list[str] = []

    def load(config: Any) -> Any:
        asked.append(config.model.name)
        return model

    monkeypatch.setattr(cli, "load_configured_model", load)
    return asked


def terminal(out: str) -> tuple[list[str], list[str]]:
    """(partials shown, final lines) of listen's terminal output."""
    finals, partials = [], []
    for line in out.split("\n")[:-1]:
        pieces = line.split(CLEAR_LINE)
        finals.append(pieces[-1])
        partials += [p for p in pieces[:-1] if p]
    return partials, finals


def seconds(h: str | None, m: str, s: str, ms: str) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def check_times(spans: list[tuple[float, float]], audio_s: float) -> None:
    assert spans, "no captions"
    for (start, end), (next_start, _) in zip(spans, spans[1:] + [(audio_s, audio_s)], strict=True):
        assert 0 <= start <= end <= next_start + 0.05 <= audio_s + 0.1


def read_srt(path: Path, audio_s: float) -> list[str]:
    blocks = path.read_text().strip().split("\n\n")
    cues = [SRT_CUE.fullmatch(b) for b in blocks]
    assert all(cues), path.read_text()
    assert [int(c[1]) for c in cues] == list(range(1, len(cues) + 1))  # type: ignore[index]
    check_times([(seconds(*c.groups()[1:5]), seconds(*c.groups()[5:9])) for c in cues], audio_s)  # type: ignore[union-attr]
    return [c[10] for c in cues]  # type: ignore[index]


def read_vtt(path: Path, audio_s: float) -> list[str]:
    text = path.read_text()
    assert text.startswith("WEBVTT\n\n")
    cues = [VTT_CUE.fullmatch(b) for b in text[len("WEBVTT\n\n") :].strip().split("\n\n")]
    assert all(cues), text
    check_times([(seconds(*c.groups()[:4]), seconds(*c.groups()[4:8])) for c in cues], audio_s)  # type: ignore[union-attr]
    return [c[9] for c in cues]  # type: ignore[index]


@pytest.mark.slow
def test_listen_in_process_captions_the_microphone(serving_model, monkeypatch, tmp_path, capsys, jfk, jfk_16k) -> None:
    use_microphone(monkeypatch, jfk_16k, 44100, speed=2.0, then="finish")
    asked = use_model(monkeypatch, serving_model)
    srt = tmp_path / "captions.srt"
    assert cli.main(["listen", "--output", str(srt), "--partials"]) == 0
    out, err = capsys.readouterr()
    assert asked == ["tiny.en"]
    assert "listening at 44100 Hz with tiny.en" in err and "Traceback" not in err
    partials, finals = terminal(out)
    assert partials, "the revisable partial is shown in place"
    assert all(finals), out
    transcript = " ".join(finals)
    assert word_error_rate([jfk.reference], [transcript]) <= 0.2, transcript  # a repeated phrase: >= 0.23
    assert read_srt(srt, len(jfk_16k) / 16000) == finals  # one cue per final, as it was finalised
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.slow
def test_ctrl_c_ends_listen_and_finalises_the_pending_audio(
    serving_model, monkeypatch, tmp_path, capsys, jfk, jfk_16k
) -> None:
    # Cut right after "country": the last utterance has no endpoint silence, only Ctrl-C ends it.
    audio = jfk_16k[: int(10.3 * 16000)]
    use_microphone(monkeypatch, audio, 48000, speed=2.0, then="interrupt")
    use_model(monkeypatch, serving_model)
    vtt = tmp_path / "captions.vtt"
    assert cli.main(["listen", "--output", str(vtt), "--no-partials"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "interrupted" not in err
    assert CLEAR_LINE not in out
    cues = read_vtt(vtt, len(audio) / 16000)
    assert cues == out.splitlines()
    assert re.sub(r"\W", "", cues[-1].split()[-1]).lower() == "country"
    assert word_error_rate([jfk.reference], [" ".join(cues)]) <= 0.2, cues
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.slow
def test_listen_against_a_daemon(serving_model, monkeypatch, tmp_path, capsys, jfk, jfk_16k) -> None:
    use_microphone(monkeypatch, jfk_16k, 48000, speed=2.0, then="finish")
    asked = use_model(monkeypatch, serving_model)
    jsonl = tmp_path / "captions.jsonl"
    with LiveServer(serving_model) as server:
        url = server.url
        assert cli.main(["listen", "--server", url, "--output", str(jsonl), "--no-partials"]) == 0
        served = server.inspect(lambda d: d.ctx.worker.stats.requests)
    out, err = capsys.readouterr()
    assert asked == [], "with --server no model is loaded"
    assert served > 0, "the daemon's model did the recognition"
    assert f"via {url}" in err
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["text"] for r in records] == out.splitlines()
    check_times([(r["start"], r["end"]) for r in records], len(jfk_16k) / 16000)
    words = [w for r in records for w in r["words"]]
    assert words and all(w["start"] <= w["end"] for w in words)
    assert [w["end"] for w in words] == sorted(w["end"] for w in words)
    transcript = " ".join(r["text"] for r in records)
    assert word_error_rate([jfk.reference], [transcript]) <= 0.2, transcript  # a repeated phrase: >= 0.23


def test_listen_reports_an_unreachable_daemon_in_one_line(monkeypatch, capsys, jfk_16k) -> None:
    use_microphone(monkeypatch, jfk_16k, 48000, speed=0, then="finish")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"ws://127.0.0.1:{s.getsockname()[1]}"
    assert cli.main(["listen", "--server", url]) == cli.EXIT_ERROR
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"streamwhisper: error: cannot stream to {url}: "), err


class NoDevice:
    """``sounddevice.InputStream`` on a machine without an input device: PortAudio refuses to open it."""

    def __init__(self, **kwargs: Any) -> None:
        raise RuntimeError("Error querying device -1")  # sounddevice.PortAudioError says this


def test_listen_without_an_input_device_says_so_in_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(mic, "default_input_stream_factory", lambda: NoDevice)
    asked = use_model(monkeypatch, None)
    assert cli.main(["listen"]) == cli.EXIT_ERROR
    out, err = capsys.readouterr()
    assert out == "" and asked == []
    assert err == f"streamwhisper: error: {NO_INPUT_DEVICE}\n"


@pytest.mark.parametrize("args", [["listen"], ["listen", "--list-devices"]], ids=["listen", "list-devices"])
def test_listen_without_portaudio_says_so_in_one_line(monkeypatch, capsys, args: list[str]) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # as if libportaudio2 were not installed
    asked = use_model(monkeypatch, None)
    assert cli.main(args) == cli.EXIT_ERROR
    out, err = capsys.readouterr()
    assert out == "" and asked == []
    assert err.count("\n") == 1 and err.startswith("streamwhisper: error: PortAudio is not available"), err
    assert "apt-get install libportaudio2" in err


def test_list_devices_on_this_machine(capsys) -> None:
    """The real sounddevice and PortAudio (make test installs libportaudio2): a table, or one line and exit 1."""
    devices = mic.list_input_devices()
    code = cli.main(["listen", "--list-devices"])
    out, err = capsys.readouterr()
    if devices:
        assert (code, out, err) == (0, format_devices(devices), "")
    else:
        assert (code, out, err) == (cli.EXIT_ERROR, "", f"streamwhisper: error: {NO_INPUT_DEVICES}\n")


def test_device_table_marks_the_default() -> None:
    # entries shaped as sounddevice.query_devices() returns them
    devices = [
        {
            "name": "HDA Intel PCH: ALC257 Analog",
            "index": 0,
            "hostapi": 0,
            "max_input_channels": 2,
            "default_samplerate": 44100.0,
        },
        {"name": "HDMI 0", "index": 1, "hostapi": 0, "max_input_channels": 0, "default_samplerate": 48000.0},
        {"name": "USB Headset", "index": 2, "hostapi": 0, "max_input_channels": 1, "default_samplerate": 48000.0},
    ]
    table = format_devices(input_devices(devices, [{"name": "ALSA"}], default=2))
    assert table.splitlines() == [
        "    0  HDA Intel PCH: ALC257 Analog  (ALSA, 2 ch, 44100 Hz)",
        "*   2  USB Headset  (ALSA, 1 ch, 48000 Hz)",
        "(* default; choose one with --device INDEX or --device NAME)",
    ]


def test_a_slow_loop_drops_the_oldest_audio_with_one_warning(caplog) -> None:
    # 20 blocks of 0.1 s, block i filled with i; the loop reads nothing until all arrived
    audio = np.repeat(np.arange(20, dtype=np.float32), 1600) / 100
    streams: list[FilePlayingInputStream] = []

    def factory(**kwargs: Any) -> FilePlayingInputStream:
        streams.append(FilePlayingInputStream(audio, 16000, speed=0, then="finish", block=1600, **kwargs))
        return streams[-1]

    async def run() -> list[np.ndarray]:
        source = MicSource(max_buffer_s=0.5, input_stream_factory=factory)
        source.open()
        source.start()
        await asyncio.to_thread(streams[0].join)
        blocks = []
        while (block := await source.read()) is not None:
            blocks.append(block)
        source.close()
        return blocks

    with caplog.at_level(logging.WARNING, logger="streamwhisper.listen.mic"):
        blocks = asyncio.run(run())
    assert [round(float(b[0]) * 100) for b in blocks] == [15, 16, 17, 18, 19]  # copies, newest kept
    assert all(len(b) == 1600 and np.all(b == b[0]) for b in blocks)
    assert [r.message for r in caplog.records] == [
        "microphone audio dropped: the transcriber fell more than 0.5 s behind"
    ]
    assert streams[0].closed
