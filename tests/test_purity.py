"""Import boundaries, checked on the AST: the streaming core stays sans-I/O (no event loop,
threads, sockets, devices or wall clock), the model knows none of its callers, and the signal
code knows no model."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "streamwhisper"
CORE = sorted(
    [
        *PACKAGE.joinpath("audio").rglob("*.py"),
        *PACKAGE.joinpath("streaming").rglob("*.py"),
        PACKAGE / "events.py",
    ]
)
MODEL = sorted(PACKAGE.joinpath("model").rglob("*.py"))
FORBIDDEN = {
    "asyncio",
    "threading",
    "socket",
    "websockets",
    "sounddevice",
    "time",
    # the same things by other names
    "concurrent",
    "multiprocessing",
    "selectors",
    "_thread",
    "datetime",
}


def imports_of(source: str, package: str) -> list[tuple[int, str]]:
    """Absolute names of every module (and imported name) in ``source``, anywhere in it."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # "from ..x import y" is resolved against the file's package
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def imports_of_file(path: Path) -> list[tuple[int, str]]:
    package = ".".join(path.relative_to(PACKAGE.parent).parts[:-1])
    return imports_of(path.read_text(), package)


def _id(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_the_core_exists() -> None:
    names = {_id(p) for p in CORE}
    expected = {
        "events.py",
        "audio/mel.py",
        "audio/vad.py",
        "audio/ring.py",
        "streaming/agreement.py",
        "streaming/screening.py",
        "streaming/streamer.py",
    }
    assert expected <= names


@pytest.mark.parametrize("path", CORE, ids=_id)
def test_core_modules_do_no_io(path: Path) -> None:
    bad = [
        f"line {line}: {name}"
        for line, name in imports_of_file(path)
        if name.split(".")[0] in FORBIDDEN or name.startswith("streamwhisper.runtime")
    ]
    assert not bad, f"{_id(path)} imports {bad}"


# What the model may not know: the signal code, the streaming core, the daemon and the apps.
MODEL_CALLERS = tuple(
    f"streamwhisper.{name}" for name in ("audio", "streaming", "runtime", "listen", "transcribe", "cli", "bench")
)


def test_the_model_package_is_walked() -> None:
    names = {_id(p) for p in MODEL}
    assert {"model/whisper.py", "model/decoding.py", "model/serving.py", "model/config.py"} <= names


@pytest.mark.parametrize("path", MODEL, ids=_id)
def test_model_knows_no_callers(path: Path) -> None:
    bad = [
        f"line {line}: {name}"
        for line, name in imports_of_file(path)
        if name == "streamwhisper" or any(name == c or name.startswith(c + ".") for c in MODEL_CALLERS)
    ]
    assert not bad, f"{_id(path)} imports {bad}"


@pytest.mark.parametrize("path", sorted(PACKAGE.joinpath("audio").rglob("*.py")), ids=_id)
def test_signal_code_knows_no_model(path: Path) -> None:
    """audio/ is pure signal code: no torch, nothing from model/ (the two share whisper_input)."""
    bad = [
        f"line {line}: {name}"
        for line, name in imports_of_file(path)
        if name.split(".")[0] == "torch" or name.startswith("streamwhisper.model")
    ]
    assert not bad, f"{_id(path)} imports {bad}"


def test_loading_the_configuration_imports_no_torch() -> None:
    code = "import sys, streamwhisper.config, streamwhisper.cli\nprint('torch' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_checker_sees_relative_and_nested_imports() -> None:
    source = "import numpy\ndef f():\n    import time\nfrom ..runtime import worker\nfrom . import agreement\n"
    names = [name for _, name in imports_of(source, "streamwhisper.streaming")]
    assert "time" in names
    assert "streamwhisper.runtime" in names
    assert "streamwhisper.streaming.agreement" in names
    names = [name for _, name in imports_of("from ..audio.mel import N_FRAMES\n", "streamwhisper.model")]
    assert "streamwhisper.audio.mel" in names
