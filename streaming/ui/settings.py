"""The ``[ui]`` configuration keys, read in this one place (docs/configuration.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from streaming.config import ConfigError, StreamingConfig, UiConfig

STALE_FACTOR = 3  # stale after this many trigger intervals without a micro-batch ...
STALE_FLOOR_S = 30.0  # ... but never sooner (the first micro-batch of a large cluster is slow)

_UNITS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0, "sec": 1.0, "second": 1.0,
          "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0,
          "hour": 3600.0, "hours": 3600.0}


def interval_seconds(text: str) -> float:
    """A Spark trigger interval ("10 seconds", "500 milliseconds", "1 minute") in seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text or "")
    if not m or m.group(2).lower() not in _UNITS | {"": 1.0}:
        raise ConfigError(f"streaming.trigger_interval: expected e.g. '10 seconds', got {text!r}")
    return float(m.group(1)) * _UNITS.get(m.group(2).lower(), 1.0)


@dataclass(frozen=True)
class UISettings:
    enabled: bool = False
    port: int = 9465
    bind: str = "127.0.0.1"
    basic_user: str = ""
    basic_password: str = ""
    token: str = ""
    stale_after_s: float = STALE_FLOOR_S

    @property
    def auth_required(self) -> bool:
        return bool(self.token or self.basic_user)

    def __repr__(self) -> str:  # never print the secrets (logs, tracebacks)
        return (f"UISettings(enabled={self.enabled}, port={self.port}, bind={self.bind!r}, "
                f"basic_auth={'on' if self.basic_user else 'off'}, token={'on' if self.token else 'off'}, "
                f"stale_after_s={self.stale_after_s})")

    @classmethod
    def from_config(cls, ui: UiConfig, streaming: StreamingConfig) -> UISettings:
        """The ``[ui]`` section (plus ``streaming.trigger_interval`` for the default staleness limit)."""
        if bool(ui.basic_user) != bool(ui.basic_password):
            raise ConfigError("ui.basic_user and ui.basic_password go together (both set, or neither)")
        if not 0 <= ui.port <= 65535:
            raise ConfigError(f"ui.port: expected 0-65535, got {ui.port}")
        stale = float(ui.stale_after_s)
        if stale <= 0:
            stale = max(STALE_FACTOR * interval_seconds(streaming.trigger_interval or "10 seconds"), STALE_FLOOR_S)
        return cls(enabled=ui.enabled, port=ui.port, bind=ui.bind, basic_user=ui.basic_user,
                   basic_password=ui.basic_password, token=ui.token, stale_after_s=stale)
