"""deploy/: two real daemons behind a real HAProxy (deploy/haproxy.cfg as shipped, its addresses
aside), and the nginx and systemd examples.

Eight clients stream real speech through HAProxy; sessions spread over both nodes (leastconn).
One node gets SIGTERM mid-stream: its clients get the finals of everything it received, ``closed``
and 1001, open a new session through HAProxy (which lands on the other node) from
``closed.audio_seconds`` on, and finish. Their whole transcripts lose no word against those of
the clients that were never moved (the same clip, uninterrupted).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from pathlib import Path

import jiwer
import pytest
from conftest import joined

from benchmarks.cluster import HAPROXY, HAProxy, Node, free_port, haproxy_config, stream_moving, transcript
from benchmarks.scoring import normalize, word_error_rate

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
CLIPS = ("en_ls_dev_1272-141231-0002", "en_ls_dev_2412-153948-0000")  # 25 s of read speech
NGINX = "/usr/sbin/nginx"
CLIENTS = 8
SMALL = {  # each node could take every client alone; a drain never waits long
    "STREAMWHISPER_SERVER_MAX_SESSIONS": "8",
    "STREAMWHISPER_SERVER_SHUTDOWN_TIMEOUT_S": "20",
    "STREAMWHISPER_SERVER_WEB_PAGE": "false",
}


def lost_and_added(reference: str, hypothesis: str) -> tuple[int, int]:
    """(deleted, inserted) words of ``hypothesis`` against ``reference``, normalised."""
    out = jiwer.process_words(normalize(reference), normalize(hypothesis))
    return out.deletions, out.insertions


@pytest.mark.slow
@pytest.mark.skipif(not Path(HAPROXY).exists(), reason="needs /usr/sbin/haproxy (apt-get install haproxy)")
def test_two_nodes_behind_haproxy_share_sessions_and_a_drained_node_loses_no_word(tmp_path: Path) -> None:
    audio, reference = joined(CLIPS, 0.5)
    nodes = [Node("node1", SMALL), Node("node2", SMALL)]
    proxy: HAProxy | None = None
    try:
        for node in nodes:
            node.wait_ready()
        proxy = HAProxy(haproxy_config(free_port(), nodes), tmp_path)
        proxy.wait_ready()
        url = proxy.url

        async def run() -> list:
            progress = [asyncio.Event() for _ in range(CLIENTS)]
            tasks = [asyncio.create_task(stream_moving(url, audio, p, at_s=8.0)) for p in progress]
            for p in progress:
                await p.wait()
            nodes[0].sigterm()  # mid-stream, mid-utterance for most clients
            return await asyncio.gather(*tasks)

        results = asyncio.run(run())
        assert nodes[0].proc.wait(timeout=60) == 0, "".join(nodes[0].lines)
    finally:
        if proxy is not None:
            proxy.stop()
        for node in nodes:
            node.stop()
    spread = Counter(legs[0].node for legs in results)
    assert set(spread) == {"node1", "node2"} and max(spread.values()) - min(spread.values()) <= 2, spread
    moved = [legs for legs in results if legs[0].node == "node1"]
    stayed = [legs for legs in results if legs[0].node == "node2"]
    for legs in moved:
        first, second = legs
        assert first.close_code == 1001 and first.closed["reason"] == "shutdown"
        assert 7.0 <= second.offset < len(audio) / 16000, "it had heard (almost) all audio sent before the SIGTERM"
        assert second.node == "node2" and second.close_code == 1000 and second.closed["reason"] == "eof"
        assert second.offset + second.closed["audio_seconds"] == pytest.approx(len(audio) / 16000, abs=0.01)
    for legs in stayed:
        assert len(legs) == 1 and legs[0].close_code == 1000 and legs[0].closed["reason"] == "eof"
    # no word lost across the move: the moved transcripts lose no more words against the
    # reference than those of the same audio never moved, but for the one word the cut may fall
    # in; and add at most two more (that word heard as two halves, each a word)
    lost, added = zip(*(lost_and_added(reference, transcript(legs)) for legs in stayed), strict=True)
    for legs in moved:
        text = transcript(legs)
        deleted, inserted = lost_and_added(reference, text)
        cut = [transcript(legs[:1])[-60:], transcript(legs[1:])[:60]]
        assert deleted <= max(lost) + 1 and inserted <= max(added) + 2, (deleted, inserted, lost, added, cut)
        assert word_error_rate([reference], [text]) <= 0.25, text
    for legs in stayed:
        assert word_error_rate([reference], [transcript(legs)]) <= 0.25


@pytest.mark.skipif(not Path(HAPROXY).exists(), reason="needs /usr/sbin/haproxy (apt-get install haproxy)")
def test_the_haproxy_example_is_valid_as_shipped() -> None:
    check = subprocess.run([HAPROXY, "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.skipif(not Path(NGINX).exists(), reason="needs /usr/sbin/nginx (apt-get install nginx)")
def test_the_nginx_example_is_valid(tmp_path: Path) -> None:
    check = subprocess.run(
        [NGINX, "-t", "-c", str(DEPLOY / "nginx.conf"), "-p", str(tmp_path), "-g", f"pid {tmp_path}/nginx.pid;"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_the_systemd_unit_stops_with_sigterm_and_waits_longer_than_the_drain() -> None:
    lines = (DEPLOY / "streamwhisper.service").read_text().splitlines()
    service = lines[lines.index("[Service]") + 1 :]
    keys = [line.split("=", 1) for line in service if "=" in line and not line.startswith("#")]
    env = dict(value.split("=", 1) for key, value in keys if key == "Environment")
    settings = {key: value for key, value in keys if key != "Environment"}
    assert settings["KillSignal"] == "SIGTERM"
    assert int(settings["TimeoutStopSec"]) > float(env["STREAMWHISPER_SERVER_SHUTDOWN_TIMEOUT_S"])
    assert "--agent-port" in settings["ExecStart"], "HAProxy's agent check reads it"
