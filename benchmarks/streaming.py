"""Streaming latency/WER benchmark: ``streamwhisper bench`` over the eval longform and read_en sets.

Prints one JSON object per configuration (computation-aware by default). Figures, never asserts.

    .venv/bin/python benchmarks/streaming.py                      # longform, default settings
    .venv/bin/python benchmarks/streaming.py --category read_en --category nonspeech
    .venv/bin/python benchmarks/streaming.py --unaware --step 0.5
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import shared_data_dir  # noqa: E402
from streamwhisper.cli import main  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    manifest = str(shared_data_dir() / "eval" / "manifest.tsv")
    if "--manifest" not in args and not any(a.endswith((".wav", ".flac", ".mp3")) for a in args):
        args = ["--manifest", manifest, *args]
    if "--category" not in args and "--manifest" in args:
        args += ["--category", "longform"]
    sys.exit(main(["bench", "--json", *args]))
