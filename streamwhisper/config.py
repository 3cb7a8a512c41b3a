"""Layered configuration, resolved once: dataclass defaults -> TOML file -> environment -> flags.

This module defines no setting: each stage's frozen, validated dataclass lives beside its code
(``[model]`` and ``[recognizer]`` in ``model/config.py``, ``[streaming]`` in
``streaming/config.py`` with ``[streaming.vad]`` from ``audio/vad.py``, ``[server]`` in
``runtime/config.py``); :class:`Config` holds one of each. The same setting is ``key`` under
``[section]`` in the TOML file, ``STREAMWHISPER_<SECTION>_<KEY>`` in the environment (nested
tables too: ``STREAMWHISPER_RECOGNIZER_FALLBACK_TEMPERATURES``), and a command-line flag where
the CLI offers one. ``config/streamwhisper.toml`` documents every key with its default (a test
keeps the two equal).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .model.config import ModelConfig, RecognizerConfig
from .runtime.config import ServerConfig
from .streaming.config import StreamingConfig

ENV_PREFIX = "STREAMWHISPER_"
# Variables older than the STREAMWHISPER_<SECTION>_<KEY> scheme, read as the setting they stand
# for, in this order (a later one wins; the setting's own variable wins over all of them).
ENV_ALIASES: tuple[tuple[str, str, str, Callable[[str], str]], ...] = (
    ("XDG_CACHE_HOME", "model", "download_root", lambda value: os.path.join(value, "streamwhisper")),
    ("STREAMWHISPER_CACHE", "model", "download_root", str),
    ("STREAMWHISPER_DOWNLOAD_URL", "model", "download_url", str),
)


@dataclass(frozen=True)
class Config:
    """Every stage's settings, one section each: each stage's frozen config lives beside its code."""

    model: ModelConfig = field(default_factory=ModelConfig)
    recognizer: RecognizerConfig = field(default_factory=RecognizerConfig)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    server: ServerConfig = field(default_factory=ServerConfig)


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert a TOML or environment value to the field's type."""
    hint = annotation
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value in (None, "", "none", "None"):
            return None
        hint = args[0]
    origin = typing.get_origin(hint)
    if not isinstance(value, str):  # a typed TOML value must already have the right type
        expected = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}.get(hint)
        wrong_bool = isinstance(value, bool) and hint is not bool
        if origin is tuple and not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        if expected is not None and (wrong_bool or not isinstance(value, expected)):
            raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if hint is int:
            if isinstance(value, bool):
                raise ValueError("a boolean is not an integer")
            return int(value)
        if hint is float:
            return float(value)
        if hint is str:
            return str(value)
        if origin is tuple:
            items = value if isinstance(value, (list, tuple)) else [v for v in str(value).split(",") if v.strip()]
            inner = typing.get_args(hint)[0]
            return tuple(_coerce(v.strip() if isinstance(v, str) else v, inner, where) for v in items)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return value


def _section_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _apply(section: Any, values: Mapping[str, Any], where: str) -> Any:
    hints = _section_types(type(section))
    names = {f.name for f in dataclasses.fields(section)}
    changes = {}
    for key, value in values.items():
        if key not in names:
            raise ConfigError(f"{where}: unknown setting {key!r} (known: {', '.join(sorted(names))})")
        current = getattr(section, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}.{key} must be a table")
            changes[key] = _apply(current, value, f"{where}.{key}")
        else:
            changes[key] = _coerce(value, hints[key], f"{where}.{key}")
    try:
        return dataclasses.replace(section, **changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """Resolve the configuration: defaults, then ``path`` (TOML), then ``env``, then ``overrides``.

    ``overrides`` maps section -> {key: value} (nested tables as nested mappings) for flags given
    on the command line (None values are ignored, so unset flags keep the layers below them).
    ``env`` also holds the older names of settings (``ENV_ALIASES``: ``STREAMWHISPER_CACHE``,
    ``STREAMWHISPER_DOWNLOAD_URL``, ``XDG_CACHE_HOME``).
    Raises:
        ConfigError: unreadable file, unknown section or key, a value of the wrong type.
    """
    config = Config()
    env = os.environ if env is None else env
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config file ({exc.strerror or exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML ({exc})") from None
        config = _merge(config, data, str(path))
    from_env: dict[str, dict[str, Any]] = {}
    for alias, alias_section, key, value_of in ENV_ALIASES:
        if env.get(alias):
            from_env.setdefault(alias_section, {})[key] = value_of(env[alias])
    sections = {f.name for f in dataclasses.fields(config)}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section = next((s for s in sections if rest.startswith(s + "_")), None)
        if section is None:
            continue  # other STREAMWHISPER_* variables are not settings
        _place_env(getattr(config, section), rest[len(section) + 1 :], value, from_env.setdefault(section, {}))
    config = _merge(config, from_env, "environment")
    if overrides:
        config = _merge(config, _without_none(overrides), "command line")
    return config


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without its None entries, in nested tables too (flags that were not given)."""
    return {k: _without_none(v) if isinstance(v, Mapping) else v for k, v in values.items() if v is not None}


def _place_env(section: Any, rest: str, value: str, into: dict[str, Any]) -> None:
    """Put STREAMWHISPER_<SECTION>_<rest> into ``into``, descending into nested tables."""
    for f in dataclasses.fields(section):
        current = getattr(section, f.name)
        if rest == f.name and not dataclasses.is_dataclass(current):
            into[f.name] = value
            return
        if dataclasses.is_dataclass(current) and rest.startswith(f.name + "_"):
            _place_env(current, rest[len(f.name) + 1 :], value, into.setdefault(f.name, {}))
            return


def _merge(config: Config, data: Mapping[str, Any], where: str) -> Config:
    changes = {}
    for section, values in data.items():
        if not hasattr(config, section) or not dataclasses.is_dataclass(getattr(config, section)):
            raise ConfigError(f"{where}: unknown section [{section}]")
        if not isinstance(values, Mapping):
            raise ConfigError(f"{where}: [{section}] must be a table")
        changes[section] = _apply(getattr(config, section), values, f"{where} [{section}]")
    return dataclasses.replace(config, **changes)


def as_toml_defaults() -> dict[str, dict[str, Any]]:
    """The defaults as TOML would hold them (for checking config/streamwhisper.toml)."""
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return list(value) if isinstance(value, tuple) else value

    return {f.name: plain(dataclasses.asdict(getattr(Config(), f.name))) for f in dataclasses.fields(Config)}
