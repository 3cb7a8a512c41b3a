"""Tests for the ``streamwhisper`` command (streamwhisper.cli), run in-process with ``main([...])``.

Errors must end as exactly one ``streamwhisper: error: ...`` line on stderr and an exit code, never a
traceback. After the first test, the configured model is loaded once per (name, compute type) for
the module: the real ``load_configured_model`` wrapped in a cache, not a fake.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.scoring import Clip, normalize
from streamwhisper import cli

# torch.ao.quantization warns that it is deprecated when the default compute type (int8_logits) is
# loaded; see test_model.py::test_default_compute_type_loads_with_warnings_as_errors.
pytestmark = pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning")

JFK_TEXT = "And so my fellow Americans ask not what your country can do for you ask what you can do for your country"
REPO_ROOT = Path(__file__).resolve().parents[1]
SRT_TIME = r"\d\d:\d\d:\d\d,\d\d\d"
VTT_TIME = r"(?:\d\d:)?\d\d:\d\d\.\d\d\d"


@pytest.fixture(scope="module")
def model_cache() -> dict[tuple[str, str, str], Any]:
    return {}


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch, model_cache: dict) -> list[str]:
    """Cache the CLI's model loading for the module; returns the names the CLI asked for."""
    real = cli.load_configured_model
    asked: list[str] = []

    def load(config):  # type: ignore[no-untyped-def]
        asked.append(config.model.name)
        key = (config.model.name, config.model.compute_type, config.model.device)
        if key not in model_cache:
            model_cache[key] = real(config)
        return model_cache[key]

    monkeypatch.setattr(cli, "load_configured_model", load)
    return asked


@pytest.fixture(scope="module")
def jfk_path(clips: dict[str, Clip]) -> Path:
    return clips["en_jfk"].wav


def assert_one_error_line(err: str, *fragments: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("streamwhisper: error:"), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


# ---------------------------------------------------------------- transcribe: output formats


@pytest.mark.slow
def test_transcribe_prints_the_text(jfk_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the one test that goes through the real, uncached model loading
    assert cli.main(["transcribe", str(jfk_path)]) == 0
    out, err = capsys.readouterr()
    assert normalize(out) == normalize(JFK_TEXT)
    assert out.endswith("\n")
    assert err == ""


@pytest.mark.slow
def test_transcribe_json(jfk_path: Path, loads: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcribe", str(jfk_path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert set(doc) == {"text", "language", "segments"}
    assert normalize(doc["text"]) == normalize(JFK_TEXT)
    assert doc["language"] == "en"
    assert doc["segments"]
    for seg in doc["segments"]:
        assert {"start", "end", "text"} <= set(seg)
        assert "words" not in seg
        assert 0.0 <= seg["start"] <= seg["end"] <= 11.0
    assert "".join(s["text"] for s in doc["segments"]) == doc["text"]
    assert loads == ["tiny.en"]


@pytest.mark.slow
def test_transcribe_json_with_word_timestamps(
    jfk_path: Path, loads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["transcribe", str(jfk_path), "--format", "json", "--word-timestamps"]) == 0
    doc = json.loads(capsys.readouterr().out)
    words = [w for seg in doc["segments"] for w in seg["words"]]
    assert normalize(" ".join(w["word"] for w in words)) == normalize(JFK_TEXT)
    for w in words:
        assert set(w) == {"word", "start", "end", "probability"}
        assert 0.0 <= w["start"] <= w["end"] <= 11.0
        assert 0.0 <= w["probability"] <= 1.0
    starts = [w["start"] for w in words]
    assert starts == sorted(starts)


@pytest.mark.slow
def test_transcribe_srt(jfk_path: Path, loads: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcribe", str(jfk_path), "--format", "srt"]) == 0
    out = capsys.readouterr().out
    blocks = out.strip().split("\n\n")
    assert blocks
    for index, block in enumerate(blocks, start=1):
        lines = block.split("\n")
        assert lines[0] == str(index)
        assert re.fullmatch(rf"{SRT_TIME} --> {SRT_TIME}", lines[1]), lines[1]
        assert lines[2].strip()
    assert normalize(" ".join(b.split("\n", 2)[2] for b in blocks)) == normalize(JFK_TEXT)


@pytest.mark.slow
def test_transcribe_vtt(jfk_path: Path, loads: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcribe", str(jfk_path), "--format", "vtt"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("WEBVTT\n\n")
    cues = out[len("WEBVTT\n\n") :].strip().split("\n\n")
    assert cues
    for cue in cues:
        timing, text = cue.split("\n", 1)
        assert re.fullmatch(rf"{VTT_TIME} --> {VTT_TIME}", timing), timing
        assert text.strip()
    assert "," not in cues[0].split("\n")[0]  # VTT uses a decimal point


@pytest.mark.parametrize("fmt", ["txt", "json", "srt"])
@pytest.mark.slow
def test_output_dir_writes_stem_dot_format(
    fmt: str, jfk_path: Path, tmp_path: Path, loads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "new" / "dir"  # created when missing
    assert cli.main(["transcribe", str(jfk_path), "--format", fmt, "--output-dir", str(out_dir)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""
    written = out_dir / f"{jfk_path.stem}.{fmt}"
    assert sorted(p.name for p in out_dir.iterdir()) == [written.name]
    content = written.read_text(encoding="utf-8")
    if fmt == "json":
        content = json.loads(content)["text"]
    elif fmt == "srt":
        content = " ".join(line for line in content.splitlines() if line and not line.isdigit() and "-->" not in line)
    assert normalize(content) == normalize(JFK_TEXT)


# ---------------------------------------------------------------- transcribe: errors


def test_missing_file(tmp_path: Path, loads: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "absent.wav"
    assert cli.main(["transcribe", str(missing)]) == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert_one_error_line(err, str(missing), "no such file")
    assert loads == []  # failed before loading the model


def test_undecodable_file(tmp_path: Path, loads: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "noise.wav"
    bad.write_bytes(bytes(range(256)) * 40)
    assert cli.main(["transcribe", str(bad)]) == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert_one_error_line(err, str(bad))


@pytest.mark.slow
def test_undecodable_file_among_good_ones(
    tmp_path: Path, jfk_path: Path, loads: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really")
    assert cli.main(["transcribe", str(bad), str(jfk_path)]) == 1  # the good file is still transcribed
    out, err = capfd.readouterr()
    assert normalize(out) == normalize(JFK_TEXT)
    assert_one_error_line(err, str(bad))


def test_unknown_model(jfk_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcribe", str(jfk_path), "--model", "nosuch"]) == 1
    out, err = capfd.readouterr()
    assert out == ""
    line = assert_one_error_line(err, "nosuch")
    assert "known models" in line and "tiny.en" in line and "base" in line


@pytest.mark.parametrize(
    "args",
    [["--beam-size", "x"], ["--format", "docx"], ["--no-such-flag"], []],
    ids=["bad-int", "bad-choice", "unknown-flag", "no-files"],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], jfk_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    files = [str(jfk_path)] if args else []
    with pytest.raises(SystemExit) as info:
        cli.main(["transcribe", *files, *args])
    assert info.value.code == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert_one_error_line(err, "(see --help)")


def test_beam_size_below_one(jfk_path: Path, loads: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcribe", str(jfk_path), "--beam-size", "0"]) == 1
    assert_one_error_line(capfd.readouterr().err, "--beam-size")
    assert loads == []


def test_unknown_language(jfk_path: Path, loads: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["transcribe", str(jfk_path), "--language", "klingon"]) == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert_one_error_line(err, "klingon")


def test_unreadable_config_file(
    jfk_path: Path, tmp_path: Path, loads: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "absent.toml"
    assert cli.main(["transcribe", str(jfk_path), "--config", str(config)]) == 1
    assert_one_error_line(capfd.readouterr().err, str(config))
    assert loads == []


@pytest.mark.slow
def test_config_file_selects_the_model(
    jfk_path: Path, tmp_path: Path, loads: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "settings.toml"
    config.write_text('[model]\nname = "nosuch-from-file"\n', encoding="utf-8")
    assert cli.main(["transcribe", str(jfk_path), "--config", str(config)]) == 1
    assert_one_error_line(capfd.readouterr().err, "nosuch-from-file")
    assert loads == ["nosuch-from-file"]
    # a flag overrides the file
    assert cli.main(["transcribe", str(jfk_path), "--config", str(config), "--model", "tiny.en"]) == 0
    assert normalize(capfd.readouterr().out) == normalize(JFK_TEXT)
    assert loads[-1] == "tiny.en"


# ---------------------------------------------------------------- models


def _assert_models_listing(out: str) -> None:
    rows = {line[2:].split()[0]: line for line in out.splitlines() if line[:2] in ("* ", "  ")}
    assert rows["tiny.en"].startswith("* ")  # the default
    assert "installed" in rows["tiny.en"] and "not installed" not in rows["tiny.en"]
    assert "base" in rows
    assert "installed" in rows["base"] and "not installed" not in rows["base"]
    assert "large-v3" in rows


def test_models_lists_installed_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["models"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    _assert_models_listing(out)


@pytest.mark.slow
def test_console_script_models() -> None:
    script = REPO_ROOT / ".venv" / "bin" / "streamwhisper"
    if not script.is_file():
        script_on_path = shutil.which("streamwhisper")
        if script_on_path is None:
            pytest.skip("the streamwhisper console script is not installed")
        script = Path(script_on_path)
    done = subprocess.run([str(script), "models"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    _assert_models_listing(done.stdout)


@pytest.mark.slow
def test_python_dash_m_models() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamwhisper", "models"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    _assert_models_listing(done.stdout)
