"""Offline Whisper tokenizer built on ``tiktoken``.

The BPE vocabularies ship as gzip-compressed ``.tiktoken`` files in
``streamwhisper/assets`` (see ``tools/build_vocab_assets.py``), so building an
encoding never touches the network or tiktoken's download cache.  Nothing is
loaded at import time; encodings are built lazily and cached per kind.
"""

from __future__ import annotations

import base64
import gzip
import string
from dataclasses import dataclass
from functools import cache, cached_property
from importlib.resources import files
from typing import Literal

import tiktoken

__all__ = [
    "LANGUAGES",
    "TO_LANGUAGE_CODE",
    "Tokenizer",
    "get_encoding",
    "get_tokenizer",
    "special_token_names",
]

EncodingKind = Literal["gpt2", "multilingual"]
Task = Literal["transcribe", "translate"]

# Whisper's pre-tokenisation regex (identical to GPT-2's).
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
NUM_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>
TIMESTAMP_STEP = 0.02

# Language code -> English name, in Whisper's token order (the order defines token ids).
LANGUAGES: dict[str, str] = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak",
    "te": "telugu", "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian",
    "az": "azerbaijani", "sl": "slovenian", "kn": "kannada", "et": "estonian", "mk": "macedonian",
    "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian", "ne": "nepali",
    "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian", "sw": "swahili",
    "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala", "km": "khmer",
    "sn": "shona", "yo": "yoruba", "so": "somali", "af": "afrikaans", "oc": "occitan",
    "ka": "georgian", "be": "belarusian", "tg": "tajik", "sd": "sindhi", "gu": "gujarati",
    "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek", "fo": "faroese",
    "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk", "mt": "maltese",
    "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan", "tl": "tagalog",
    "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian", "ln": "lingala",
    "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}  # fmt: skip

# Language name (or common alias) -> code.
TO_LANGUAGE_CODE: dict[str, str] = {
    **{name: code for code, name in LANGUAGES.items()},
    "burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht",
    "letzeburgesch": "lb", "pushto": "ps", "panjabi": "pa", "moldavian": "ro",
    "moldovan": "ro", "sinhalese": "si", "castilian": "es", "mandarin": "zh",
}  # fmt: skip

# Languages written without spaces: words are split at unicode boundaries instead.
NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})


def special_token_names(num_languages: int = 99) -> list[str]:
    """Whisper's special tokens in id order (they follow the regular BPE tokens)."""
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *(f"<|{code}|>" for code in list(LANGUAGES)[:num_languages]),
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
        *(f"<|{i * TIMESTAMP_STEP:.2f}|>" for i in range(NUM_TIMESTAMPS)),
    ]


def _load_ranks(kind: EncodingKind) -> dict[bytes, int]:
    """Read ``assets/<kind>.tiktoken.gz`` (lines ``base64(token) rank``) from package data."""
    resource = files("streamwhisper").joinpath("assets", f"{kind}.tiktoken.gz")
    text = gzip.decompress(resource.read_bytes()).decode("ascii")
    ranks: dict[bytes, int] = {}
    for line in text.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)  # "=" encodes the empty token
    return ranks


@cache
def get_encoding(kind: EncodingKind = "gpt2", num_languages: int = 99) -> tiktoken.Encoding:
    """Build (once per ``kind``/``num_languages``) the ``tiktoken.Encoding`` fully offline."""
    if kind not in ("gpt2", "multilingual"):
        raise ValueError(f"Unknown encoding kind: {kind!r}")
    if not 1 <= num_languages <= len(LANGUAGES):
        raise ValueError(f"num_languages must be in [1, {len(LANGUAGES)}], got {num_languages}")
    ranks = _load_ranks(kind)
    specials = {name: len(ranks) + i for i, name in enumerate(special_token_names(num_languages))}
    return tiktoken.Encoding(
        name=kind,
        pat_str=PATTERN,
        mergeable_ranks=ranks,
        special_tokens=specials,
        explicit_n_vocab=len(ranks) + len(specials),
    )


def _special_id(name: str, doc: str) -> cached_property[int]:
    """A cached ``Tokenizer`` property returning the id of special token ``name``."""

    def getter(self: Tokenizer) -> int:
        return self.encoding.encode_single_token(name)

    getter.__doc__ = doc
    return cached_property(getter)


@dataclass(frozen=True)
class Tokenizer:
    """Whisper tokenizer: a ``tiktoken.Encoding`` plus quick access to special tokens.

    ``multilingual`` defaults to ``encoding.name != "gpt2"``.  For English-only
    tokenizers the start-of-transcript sequence is just ``<|startoftranscript|>``
    regardless of ``language``/``task``, as in Whisper.
    """

    encoding: tiktoken.Encoding
    num_languages: int = 99
    language: str | None = None
    task: Task | None = None
    multilingual: bool | None = None

    def __post_init__(self) -> None:
        if self.multilingual is None:
            object.__setattr__(self, "multilingual", self.encoding.name != "gpt2")
        if self.task not in (None, "transcribe", "translate"):
            raise ValueError(f"Unsupported task: {self.task!r}")
        if self.language is not None and self.language not in self.all_language_codes:
            raise ValueError(f"Unsupported language: {self.language!r}")

    def _special(self, name: str) -> int:
        return self.encoding.encode_single_token(name)

    # Special-token ids (cached per instance).
    eot = _special_id("<|endoftext|>", "``<|endoftext|>``; every id >= eot is special.")
    sot = _special_id("<|startoftranscript|>", "``<|startoftranscript|>``.")
    sot_prev = _special_id("<|startofprev|>", "``<|startofprev|>`` (precedes the prompt).")
    sot_lm = _special_id("<|startoflm|>", "``<|startoflm|>``.")
    no_speech = _special_id("<|nospeech|>", "``<|nospeech|>``.")
    no_timestamps = _special_id("<|notimestamps|>", "``<|notimestamps|>``.")
    timestamp_begin = _special_id("<|0.00|>", "``<|0.00|>``; id t >= it means (t - it) * 0.02 s.")
    transcribe = _special_id("<|transcribe|>", "``<|transcribe|>``.")
    translate = _special_id("<|translate|>", "``<|translate|>``.")

    @property
    def language_token(self) -> int:
        """Token of the configured ``language``; ValueError if none is set."""
        if self.language is None:
            raise ValueError("This tokenizer has no language configured")
        return self.to_language_token(self.language)

    def to_language_token(self, language: str) -> int:
        """Token id of ``<|language|>``; KeyError if the code is not in this vocabulary."""
        if language not in self.all_language_codes:
            raise KeyError(f"Language {language!r} not found in tokenizer")
        return self._special(f"<|{language}|>")

    @cached_property
    def all_language_codes(self) -> tuple[str, ...]:
        """Language codes in token-id order (Whisper's ``LANGUAGES`` order)."""
        return tuple(LANGUAGES)[: self.num_languages]

    @cached_property
    def all_language_tokens(self) -> tuple[int, ...]:
        """Language token ids in ascending id order, aligned with ``all_language_codes``."""
        return tuple(self._special(f"<|{code}|>") for code in self.all_language_codes)

    @cached_property
    def sot_sequence(self) -> tuple[int, ...]:
        """``(sot, language, task)`` for multilingual models, ``(sot,)`` for English-only."""
        seq = [self.sot]
        if self.multilingual:
            if self.language is not None:
                seq.append(self.language_token)
            if self.task is not None:
                seq.append(self.transcribe if self.task == "transcribe" else self.translate)
        return tuple(seq)

    @cached_property
    def sot_sequence_including_notimestamps(self) -> tuple[int, ...]:
        """``sot_sequence`` followed by ``<|notimestamps|>``."""
        return (*self.sot_sequence, self.no_timestamps)

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        """Sorted ids of symbol tokens to suppress (speaker tags, ``[MUSIC]``, ``♪♪`` ...).

        Basic punctuation stays allowed; hyphens and apostrophes are only suppressed
        at the start of a word (``" -"``, ``" '"``).
        """
        symbols = [*'"#()*+/:;<=>@[\\]^_`{|}~「」『』']
        symbols += [
            "<<",
            ">>",
            "<<<",
            ">>>",
            "--",
            "---",
            "-(",
            "-[",
            "('",
            '("',
            "((",
            "))",
            "(((",
            ")))",
            "[[",
            "]]",
            "{{",
            "}}",
            "♪♪",
            "♪♪♪",
        ]
        # U+2640..U+267F symbols share their first two UTF-8 bytes, so suppressing the
        # first token is safe even when they are split into several tokens.
        misc = "♩♪♫♬♭♮♯"
        found = {self.encoding.encode(" -")[0], self.encoding.encode(" '")[0]}
        for symbol in [*symbols, *misc]:
            for variant in (symbol, " " + symbol):
                ids = self.encoding.encode(variant)
                if len(ids) == 1 or symbol in misc:
                    found.add(ids[0])
        return tuple(sorted(found))

    # ------------------------------------------------------------ encode/decode
    def encode(self, text: str) -> list[int]:
        """Encode plain text; special-token strings in ``text`` raise ValueError."""
        return self.encoding.encode(text, disallowed_special="all")

    def decode(self, token_ids: list[int]) -> str:
        """Decode text, dropping timestamp tokens (ids >= ``timestamp_begin``)."""
        return self.encoding.decode([t for t in token_ids if t < self.timestamp_begin])

    def decode_with_timestamps(self, token_ids: list[int]) -> str:
        """Decode text with timestamp tokens rendered, e.g. ``"<|1.08|>"``."""
        return self.encoding.decode(list(token_ids))

    # ----------------------------------------------------------- word splitting
    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Group ``tokens`` into words, returning ``(words, word_tokens)``.

        Space-delimited languages split before a leading space; punctuation and
        special tokens become words of their own (Whisper's timing code merges
        punctuation afterwards).  For zh/ja/th/lo/my/yue every complete unicode
        character sequence is a word.
        """
        if self.language in NO_SPACE_LANGUAGES:
            return self._split_on_unicode(tokens)
        return self._split_on_spaces(tokens)

    def _split_on_unicode(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        # Close a group as soon as it decodes without U+FFFD, or when the U+FFFD
        # is genuinely present in the full decoding (invalid bytes, not a split char).
        full = self.decode_with_timestamps(tokens)
        words: list[str] = []
        groups: list[list[int]] = []
        current: list[int] = []
        offset = 0
        for token in tokens:
            current.append(token)
            text = self.decode_with_timestamps(current)
            bad = text.find("\ufffd")
            if bad < 0 or (offset + bad < len(full) and full[offset + bad] == "\ufffd"):
                words.append(text)
                groups.append(current)
                current = []
                offset += len(text)
        return words, groups

    def _split_on_spaces(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        words: list[str] = []
        groups: list[list[int]] = []
        for piece, piece_tokens in zip(*self._split_on_unicode(tokens), strict=False):
            starts_word = (
                not words
                or piece_tokens[0] >= self.eot
                or piece.startswith(" ")
                or piece.strip() in string.punctuation  # substring test, as in Whisper
            )
            if starts_word:
                words.append(piece)
                groups.append(list(piece_tokens))
            else:
                words[-1] += piece
                groups[-1].extend(piece_tokens)
        return words, groups


def get_tokenizer(
    multilingual: bool,
    *,
    num_languages: int = 99,
    language: str | None = None,
    task: Task | None = None,
) -> Tokenizer:
    """Return a Whisper tokenizer for an English-only or multilingual model.

    ``language`` may be a code (``"de"``) or a name/alias (``"German"``); it
    defaults to ``"en"`` and ``task`` to ``"transcribe"``.  English-only
    tokenizers always use ``"en"`` (any other language is ignored, as in Whisper)
    and their sot sequence omits language/task.
    """
    if language is not None:
        key = language.lower()
        language = key if key in LANGUAGES else TO_LANGUAGE_CODE.get(key)
        if language is None:
            raise ValueError(f"Unsupported language: {key!r}")
    if not multilingual:  # like Whisper, English-only models ignore language/num_languages
        language, num_languages = "en", 99
    return _cached_tokenizer(multilingual, num_languages, language or "en", task or "transcribe")


@cache
def _cached_tokenizer(multilingual: bool, num_languages: int, language: str, task: Task) -> Tokenizer:
    kind: EncodingKind = "multilingual" if multilingual else "gpt2"
    encoding = get_encoding(kind, num_languages)
    return Tokenizer(encoding, num_languages, language, task, multilingual)
