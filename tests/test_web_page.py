"""The browser captioning page end to end: real daemon, real headless Chromium, real speech.

Chromium's fake microphone plays a WAV of jfk (then 30 s of silence, so the test is done before
the file loops) into getUserMedia; the page's AudioWorklet downsamples it to 16 kHz and streams it
to the daemon, which serves the page. The test drives the page over the DevTools protocol: Start,
wait for the jfk words among the finals, drop the connection under the page (it reconnects),
Stop; then a wrong token (the error and close code are shown, no retry). Skipped only when no
Chromium binary is installed (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
from chromium import Chromium, find_chromium
from live_server import LiveServer

from benchmarks.scoring import Clip, normalize, word_error_rate
from streamwhisper.audio.convert import float32_to_pcm_s16le

pytestmark = pytest.mark.slow  # end to end: the real model

TOKEN = "page-token-123"
FINALS = "Array.from(document.querySelectorAll('#finals .final')).map(s => s.textContent.trim()).join(' ')"


@pytest.fixture(scope="module")
def browser_binary() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary found (Debian: apt-get install chromium; or set $CHROMIUM)")
    return binary


@pytest.fixture(scope="module")
def jfk(clips: dict[str, Clip]) -> Clip:
    return clips["en_jfk"]


def fake_microphone_wav(path: Path, audio: np.ndarray, silence_s: float) -> Path:
    """A 16 kHz 16-bit mono WAV of ``audio`` followed by silence (Chromium loops the file)."""
    padded = np.concatenate([audio, np.zeros(int(silence_s * 16000), dtype=np.float32)])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(float32_to_pcm_s16le(padded))
    return path


def text_of(browser: Chromium, element: str) -> str:
    return str(browser.evaluate(f"document.getElementById({json.dumps(element)}).textContent"))


def test_the_page_captions_the_microphone(browser_binary, serving_model, jfk, jfk_audio, tmp_path) -> None:
    wav = fake_microphone_wav(tmp_path / "jfk-mic.wav", jfk_audio, silence_s=30)
    last_words = " ".join(normalize(jfk.reference).split()[-3:])  # "for your country"
    with LiveServer(serving_model, auth_token=TOKEN) as server:
        page = f"{server.http}/?token={TOKEN}"
        with Chromium(tmp_path / "profile", fake_audio=wav, binary=browser_binary) as browser:
            browser.navigate(page)
            assert browser.evaluate("document.getElementById('stop').disabled") is True
            browser.click("#start")

            # the speech, as finals (the partial is shown dimmed on the way)
            browser.wait_for(f"({FINALS}).length > 0 || document.getElementById('partial').textContent", timeout=90)
            browser.wait_for("document.getElementById('status').textContent.startsWith('listening')", timeout=5)
            finals = browser.wait_for(
                f"(() => {{ const t = {FINALS}; return t.toLowerCase().replace(/[^a-z ]/g, '').trim()"
                f".endsWith({json.dumps(last_words)}) && t; }})()",
                timeout=90,
            )
            assert word_error_rate([jfk.reference], [finals]) <= 0.2, finals  # a repeated phrase: >= 0.23
            assert text_of(browser, "error") == ""
            shot = browser.screenshot(tmp_path / "captions.png")
            print(f"screenshot: {shot}")
            dimmed = browser.evaluate("getComputedStyle(document.getElementById('partial')).color")
            assert dimmed != browser.evaluate("getComputedStyle(document.getElementById('finals')).color")

            # the connection drops under the page: it shows why and reconnects on its own
            assert browser.evaluate("document.body.dataset.sessions") == "1"
            server.inspect(lambda d: [s.ws.transport.abort() for s in d.ctx.sessions])
            browser.wait_for("document.body.dataset.sessions === '2'", timeout=30)
            status = text_of(browser, "status")
            assert "reconnected after connection closed (code 1006)" in status, status
            assert browser.evaluate(FINALS) == finals, "finals are never revised"

            # Stop: eof, the server closes normally
            browser.click("#stop")
            browser.wait_for("document.getElementById('status').textContent === 'stopped'", timeout=30)
            assert browser.evaluate("document.getElementById('start').disabled") is False

            # a wrong token: the error and the close code are shown, and the page does not retry
            browser.navigate(f"{server.http}/?token=wrong")
            browser.click("#start")
            browser.wait_for("document.getElementById('error').textContent.includes('not retrying')", timeout=10)
            error = text_of(browser, "error")
            assert error.startswith("unauthorized: missing or wrong token"), error
            assert "code 1008" in error, error
            assert browser.evaluate("document.body.dataset.sessions") is None
            assert browser.evaluate("document.getElementById('start').disabled") is False
            assert not [line for line in browser.console if line.startswith("exception")], browser.console
    assert shot.stat().st_size > 10_000
