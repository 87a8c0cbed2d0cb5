"""Parsing of the options given to ``format("eos-kafka")``.

Spark hands a data source its options as a case-insensitive mapping of strings; every value is
parsed here, once, with errors that name the option and the values it accepts.
"""
from __future__ import annotations

from typing import Mapping

from .errors import ConfigurationError

_TRUE = frozenset({"true"})
_FALSE = frozenset({"false"})


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigurationError(f"option {name}={raw!r} is not a boolean; use true or false")
