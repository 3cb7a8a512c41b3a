"""The repository stands alone: no absolute path of a developer's machine, no data from outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# /work/..., /home/<user>/..., /root/..., /Users/<user>/...: paths that exist on one machine only
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|home|root|Users)/\w")
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/data\b")


# what the checkout holds besides the repository's own files (.gitignore) and binary data
NOT_OURS = {
    ".git",
    ".venv",
    ".bench-venv",
    ".hypothesis",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "__pycache__",
    "build",
    "dist",
    "artifacts",
}
BINARY = {".flac", ".npy", ".gz", ".whl", ".pyc"}


def tracked_text_files() -> list[Path]:
    return [
        path
        for path in ROOT.rglob("*")
        if path.is_file()
        and path.suffix not in BINARY
        and not any(part in NOT_OURS or part.endswith(".egg-info") for part in path.relative_to(ROOT).parts)
    ]


def test_no_absolute_path_of_a_machine() -> None:
    hits = []
    for path in tracked_text_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if MACHINE_PATH.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_only_benchmarks_read_the_evaluation_set() -> None:
    """Tests, the package and the examples use tests/data; the evaluation set beside the checkout is
    for benchmarks (and the Makefile's benchmark targets, and the tool that copied tests/data)."""
    allowed = ("benchmarks/", "Makefile", "tools/copy_test_data.py", "docs/", "tests/test_repository.py")
    hits = []
    for path in tracked_text_files():
        name = path.relative_to(ROOT).as_posix()
        if name.startswith(allowed):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if OUTSIDE.search(line):
                hits.append(f"{name}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
