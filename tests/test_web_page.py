"""The browser captioning page end to end: real daemon, real headless Chromium, real speech.

Chromium's fake microphone plays a WAV of jfk (then 30 s of silence, so the test is done before
the file loops) into getUserMedia; the page's AudioWorklet downsamples it to 16 kHz and streams it
to the daemon, which serves the page. The test drives the page over the DevTools protocol: Start,
wait for the jfk words among the finals, drop the connection under the page (it resumes),
Stop; then a wrong token (the error and close code are shown, no retry). A second test has the
page talk to the daemon through a proxy that it breaks mid-utterance: the page resumes its session
(and gets the finals it missed), then, its session forgotten, starts a new one; its captions are
the speech's words, none twice. Skipped only when no Chromium binary is installed (Debian:
``apt-get install chromium``).
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest
from chromium import Chromium, find_chromium
from live_server import LiveServer, wait_until

from benchmarks.cut_proxy import CutProxy
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

            # the connection drops under the page: it shows why and resumes its session on its own
            assert browser.evaluate("document.body.dataset.sessions") == "1"
            server.inspect(lambda d: [s.ws.transport.abort() for s in d.ctx.sessions])
            browser.wait_for("document.body.dataset.resumes === '1'", timeout=30)
            status = text_of(browser, "status")
            assert "session resumed; reconnected after connection closed (code 1006)" in status, status
            assert browser.evaluate("document.body.dataset.sessions") == "1"
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


def repeated_runs(words: list[str], longest: int) -> list[str]:
    """Runs of up to ``longest`` words followed at once by the same run ("for you for you")."""
    return [
        " ".join(words[i : i + k])
        for k in range(1, longest + 1)
        for i in range(len(words) - 2 * k + 1)
        if words[i : i + k] == words[i + k : i + 2 * k]
    ]


def mid_utterance(server: LiveServer) -> bool:
    """Whether the server's session is inside an utterance (its VAD hears speech): words not yet
    final are in flight. (The page's partial says so only when the host is fast enough to send
    one before the utterance ends: on a slow one, each of jfk's phrases went final whole.)"""

    return bool(server.inspect_pumps(lambda pumps: any(p.streamer.speaking for p in pumps)))


def test_the_page_resumes_a_cut_connection_and_loses_no_word(
    browser_binary, serving_model, jfk, jfk_audio, tmp_path
) -> None:
    """jfk three times into the microphone; the page connects through a CutProxy. Mid-utterance in
    the first jfk, the server's messages stop reaching the page (the page's audio still reaches
    the server), until the server has sent a final the page did not get; then the connection is
    reset: the page resumes, and that final is replayed. Mid-utterance in the second jfk, the
    daemon forgets the session (as a restarted one would) and the connection is reset again: the
    resume is refused and a new session gets the audio after the last final, its times moved on.
    Mid-utterance in the third, the daemon shuts down (finals, ``closed`` with ``shutdown``, 1001)
    and the proxy sends new connections to a second daemon: a new session there gets the audio
    after what the first one received."""
    gap = np.zeros(16000, dtype=np.float32)
    speech = np.concatenate([jfk_audio, gap, jfk_audio, gap, jfk_audio])
    wav = fake_microphone_wav(tmp_path / "jfk-thrice.wav", speech, silence_s=30)
    reference = " ".join([jfk.reference] * 3)
    ending = json.dumps(" ".join(normalize(jfk.reference).split()[-3:]))  # "for your country"
    shown = f"({FINALS}).toLowerCase().replace(/[^a-z ]/g, '')"
    with LiveServer(serving_model) as server, LiveServer(serving_model) as standby:
        proxy = CutProxy(server.port)
        port = server.call(proxy.start())
        resumes = server.daemon.metrics.resumes
        try:
            with Chromium(tmp_path / "profile", fake_audio=wav, binary=browser_binary) as browser:
                browser.navigate(f"http://127.0.0.1:{port}/")
                browser.click("#start")

                # 1. a final shown, the next words under way: the page stops hearing from the server
                wait_until(
                    lambda: browser.evaluate(f"({FINALS}).length > 0") and mid_utterance(server),
                    90,
                    "a final, then speech",
                )
                server.inspect(lambda d: proxy.stall(downstream_only=True))
                last_seq = browser.evaluate("state.lastSeq")

                def missed(daemon) -> list[int]:  # finals with words the session sent after the page's last
                    kept = [json.loads(t) for s in daemon.ctx.sessions for t in s._replay.since(last_seq) or []]
                    return [m["seq"] for m in kept if m["text"]]

                missed_seqs = wait_until(lambda: server.inspect(missed), 60, "a final the page did not get")
                assert browser.evaluate("state.lastSeq") == last_seq
                server.inspect(lambda d: proxy.cut())
                browser.wait_for("document.body.dataset.resumes === '1'", timeout=30)
                browser.wait_for(f"state.lastSeq >= {max(missed_seqs)}", timeout=30)  # replayed
                assert browser.evaluate("document.body.dataset.sessions") == "1"
                assert "session resumed" in text_of(browser, "status")

                # 2. in the second jfk, the session is forgotten and the connection reset
                wait_until(
                    lambda: browser.evaluate(f"{shown}.split({ending}).length === 2") and mid_utterance(server),
                    90,
                    "the second jfk under way",
                )

                def forget_and_cut(daemon) -> None:
                    for session in daemon.ctx.sessions:
                        daemon.ctx.resumes.discard(session.resume_token)
                    proxy.cut()

                server.inspect(forget_and_cut)
                browser.wait_for("document.body.dataset.sessions === '2'", timeout=30)

                # 3. in the third jfk, the daemon shuts down; new connections go to the standby
                wait_until(
                    lambda: browser.evaluate(f"{shown}.split({ending}).length === 3") and mid_utterance(server),
                    90,
                    "the third jfk under way",
                )
                proxy.target_port = standby.port
                server.shutdown()
                browser.wait_for("document.body.dataset.sessions === '3'", timeout=30)
                finals = browser.wait_for(
                    f"{shown}.split({ending}).length === 4 && {FINALS}", timeout=90
                )  # every ending shown
                starts = browser.evaluate(
                    "Array.from(document.querySelectorAll('#finals .final')).map(s => Number(s.dataset.start))"
                )
                status = text_of(browser, "status")
                assert not [line for line in browser.console if line.startswith("exception")], browser.console
        finally:
            server.call(proxy.close())
        outcomes = {outcome: resumes.labels(outcome)._value.get() for outcome in ("resumed", "refused")}
        standby_sessions = standby.daemon.metrics.sessions_total._value.get()
        standby_refused = standby.daemon.metrics.resumes.labels("refused")._value.get()
    assert outcomes == {"resumed": 1, "refused": 1}, outcomes
    assert (standby_sessions, standby_refused) == (1, 0)  # a new session, no resume of the closed one
    assert status.startswith("listening"), status
    # the words (tiny.en may hear a word or two otherwise at a session's start), none twice: audio
    # recognised twice or a final shown twice repeats a run of words where it happened (the
    # reference repeats none of up to 8 words; a longer one would cost more than this WER bound)
    assert word_error_rate([reference], [finals]) <= 0.15, finals
    assert repeated_runs(normalize(reference).split(), 8) == []
    assert repeated_runs(normalize(finals).split(), 8) == [], finals
    assert starts == sorted(starts) and starts[-1] > 2 * len(jfk_audio) / 16000, starts  # times go on
