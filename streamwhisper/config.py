"""Layered configuration, resolved once: dataclass defaults -> TOML file -> environment -> flags.

Every setting lives in a frozen dataclass section (``[model]``, ``[streaming]``, ...). The same
setting is ``key`` under ``[section]`` in the TOML file, ``STREAMWHISPER_<SECTION>_<KEY>`` in the
environment, and a command-line flag where the CLI offers one. ``config/streamwhisper.toml``
documents every key with its default (a test keeps the two equal).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import ConfigError
from .streaming.config import StreamingConfig

ENV_PREFIX = "STREAMWHISPER_"


@dataclass(frozen=True)
class ModelConfig:
    """Which model to run, and how."""

    name: str = "tiny.en"  # a known name (streamwhisper models), a CTranslate2 dir or a .pt file
    device: str = "cpu"  # cpu, cuda, cuda:N
    compute_type: str = "default"  # default, float32, mixed, int8_logits, int8, float16, bfloat16
    threads: int = 0  # torch intra-op threads; 0 = one per core
    download_root: str = ""  # where official checkpoints are cached; "" = ~/.cache/streamwhisper

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ConfigError("model.threads must be >= 0")


@dataclass(frozen=True)
class ServerConfig:
    """The daemon (``streamwhisper serve``): address, security, limits and the inference worker."""

    host: str = "127.0.0.1"
    port: int = 8765
    # Clients must send this token (Authorization: Bearer, or ?token=); "" = no authentication.
    auth_token: str = ""
    # Origin headers accepted from browsers (e.g. "https://captions.example.org"); empty = any.
    allowed_origins: tuple[str, ...] = ()
    # wss: both files set turns TLS on.
    tls_cert: str = ""
    tls_key: str = ""
    max_sessions: int = 16
    max_message_bytes: int = 1_048_576  # a larger frame closes the session with 1009
    max_session_s: float = 14_400.0  # session duration limit (4 h); 0 = none
    idle_timeout_s: float = 60.0  # no message for this long ends the session; 0 = never
    # Messages waiting for a client that does not read; beyond this the session is closed (1008).
    max_outbox: int = 256
    # Requests run together by the inference worker (encoder batch and decoder steps).
    max_batch: int = 16
    # A session whose transcript lags this far behind its audio sends requests less often (longer
    # steps, fewer partials); when the mean lag of all sessions is above refuse_lag_s, new
    # sessions are refused with 1013.
    degrade_lag_s: float = 1.5
    refuse_lag_s: float = 4.0
    max_step_s: float = 4.0
    # Send the browser captioning page at "/".
    web_page: bool = True
    # Seconds a graceful shutdown waits for the last finals before closing anyway.
    shutdown_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("server.port must be in [0, 65535]")
        if self.max_sessions < 1:
            raise ConfigError("server.max_sessions must be >= 1")
        if self.max_message_bytes < 1024:
            raise ConfigError("server.max_message_bytes must be >= 1024")
        if self.max_session_s < 0 or self.idle_timeout_s < 0:
            raise ConfigError("server.max_session_s and server.idle_timeout_s must be >= 0")
        if self.max_outbox < 8:
            raise ConfigError("server.max_outbox must be >= 8")
        if self.max_batch < 1:
            raise ConfigError("server.max_batch must be >= 1")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("server.tls_cert and server.tls_key must be given together")
        if not 0 < self.degrade_lag_s < self.refuse_lag_s:
            raise ConfigError("need 0 < server.degrade_lag_s < server.refuse_lag_s")
        if self.max_step_s < 1.0:
            raise ConfigError("server.max_step_s must be >= 1")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
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

    ``overrides`` maps section -> {key: value} for flags given on the command line (None values
    are ignored, so unset flags keep the layers below them).
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
    from_env: dict[str, dict[str, str]] = {}
    sections = {f.name for f in dataclasses.fields(config)}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section = next((s for s in sections if rest.startswith(s + "_")), None)
        if section is None:
            continue  # other STREAMWHISPER_* variables (cache paths, download URL) are not settings
        _place_env(getattr(config, section), rest[len(section) + 1 :], value, from_env.setdefault(section, {}))
    config = _merge(config, from_env, "environment")
    if overrides:
        cleaned = {s: {k: v for k, v in kv.items() if v is not None} for s, kv in overrides.items()}
        config = _merge(config, cleaned, "command line")
    return config


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
