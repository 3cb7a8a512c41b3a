"""The package's layout shows its architecture: small modules, no import circles, and an installed
package that imports nothing it does not run with."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from test_purity import PACKAGE, imports_of_file

MAX_LINES = 400
MODULES = sorted(PACKAGE.rglob("*.py"))
BENCHMARKS = sorted((PACKAGE.parent / "benchmarks").glob("*.py"))
# what the benchmarks and tests score with; the package must run without them
SCORING = ("jiwer", "whisper_normalizer", "psutil", "benchmarks")


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in it, deferred imports too)."""
    names = {_name(p) for p in MODULES}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        targets = set()
        for _, imported in imports_of_file(path):
            # "from a.b import c" names a.b.c, which is a module or a name in a.b
            while imported and imported not in names:
                imported = imported.rpartition(".")[0]
            if imported and imported != _name(path) and imported != "streamwhisper":
                targets.add(imported)
        graph[_name(path)] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_module_is_over_the_line_limit() -> None:
    assert BENCHMARKS, "the benchmarks folder moved: the limit would check nothing there"
    long = {
        p.relative_to(PACKAGE.parent).as_posix(): n
        for p in (*MODULES, *BENCHMARKS)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long


def test_modules_import_each_other_without_a_circle() -> None:
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_the_cycle_check_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_the_package_needs_no_scoring_library() -> None:
    found = [
        f"{p.relative_to(PACKAGE)}:{line} {name}"
        for p in MODULES
        for line, name in imports_of_file(p)
        if name.split(".")[0] in SCORING
    ]
    assert not found, found


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].replace("-", "_") for r in requirements}


def test_runtime_dependencies_hold_no_benchmark_library() -> None:
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    runtime = _requirement_names(project["dependencies"])
    assert "torch" in runtime and not runtime & set(SCORING), runtime
    # the benchmarks' and the tests' scoring libraries are in the bench extra instead
    assert {"jiwer", "whisper_normalizer", "psutil"} <= _requirement_names(project["optional-dependencies"]["bench"])


def test_the_listen_app_and_the_daemon_live_apart() -> None:
    graph = _graph()
    runtime_to_listen = sorted(
        (m, t)
        for m, ts in graph.items()
        if m.startswith("streamwhisper.runtime")
        for t in ts
        if t.startswith("streamwhisper.listen")
    )
    assert not runtime_to_listen, runtime_to_listen
