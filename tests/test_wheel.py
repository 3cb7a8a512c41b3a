"""A built wheel, installed apart from the source tree, serves the page and transcribes.

The wheel is built from this checkout without build isolation (no network in tests) and
installed with ``--no-deps`` into a folder of its own; the commands then run with only that
folder and the test environment's dependencies on the path, from a directory outside the
checkout, so every file they read (web page, vocabularies) must have come from the wheel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.scoring import Clip, normalize

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DATA = [
    "streamwhisper/runtime/web/index.html",
    "streamwhisper/runtime/web/app.js",
    "streamwhisper/runtime/web/pcm-worklet.js",
    "streamwhisper/assets/gpt2.tiktoken.gz",
    "streamwhisper/assets/multilingual.tiktoken.gz",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a folder of its own (with its console script in bin/)."""
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", dist, REPO_ROOT], check=True)
    (wheel,) = dist.glob("streamwhisper-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(PACKAGE_DATA) <= names, set(PACKAGE_DATA) - names
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    target = tmp_path_factory.mktemp("site")
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", target, wheel], check=True)
    return target


@pytest.fixture(scope="module")
def env(installed: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(installed), "PYTHONSAFEPATH": "1"}


def run(installed: Path, env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = installed / "bin" / "streamwhisper"
    return subprocess.run([str(script), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_the_installed_package_is_the_wheel_s(installed: Path, env: dict[str, str], tmp_path: Path) -> None:
    code = "import streamwhisper; print(streamwhisper.__file__)"
    where = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert Path(where.stdout.strip()).is_relative_to(installed), where


def test_the_wheel_transcribes(installed: Path, env: dict[str, str], tmp_path: Path, clips: dict[str, Clip]) -> None:
    jfk = clips["en_jfk"]
    done = run(installed, env, "transcribe", str(jfk.wav), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert normalize(done.stdout) == normalize(jfk.reference)


@pytest.fixture
def daemon(installed: Path, env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """``streamwhisper serve --port 0`` from the wheel; yields its http:// base URL."""
    script = installed / "bin" / "streamwhisper"
    process = subprocess.Popen(
        [str(script), "serve", "--port", "0"], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # the daemon says where it listens once it is ready
            if found := re.search(r"serving \S+ on ws://([\d.]+:\d+)/", line):
                break
        else:
            pytest.fail(f"the daemon exited ({process.wait()}) without serving")
        yield f"http://{found.group(1)}"
    finally:
        process.terminate()
        process.wait(timeout=60)
        process.stderr.close()  # type: ignore[union-attr]


def test_the_wheel_serves_the_browser_page(daemon: str) -> None:
    for path in ("/", "/app.js", "/audio-backlog.js", "/pcm-worklet.js"):
        with urllib.request.urlopen(daemon + path, timeout=30) as response:
            assert response.status == 200, path
            body = response.read().decode()
        assert body == (REPO_ROOT / "streamwhisper/runtime/web" / (path.strip("/") or "index.html")).read_text()
    with urllib.request.urlopen(daemon + "/healthz", timeout=30) as response:
        assert response.status == 200
