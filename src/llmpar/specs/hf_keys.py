"""The typed key reader of a Hugging Face ``config.json`` (:class:`ConfigReader`), below the
builders of ``specs/hf.py``: each key read as the transformers configuration classes type it, a
bad value one :class:`UserError` naming the file, the key and the model_type, and every key a
builder read recorded (``seen``), so that a cost-changing key no builder read is refused
(``specs/hf.py`` ``COST_KEYS``), never dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmpar.errors import UserError

_MISSING = object()


class ConfigReader:
    """A config dict with one-line errors that name the file and the key."""

    def __init__(self, data: dict[str, Any], path: Path, model_type: str, seen: set[str] | None = None,
                 prefix: str = ""):
        self.data, self.path, self.model_type = data, path, model_type
        self.seen = set() if seen is None else seen   # the keys a builder read (unread_cost_keys)
        # where ``data`` sits in the file ("text_config." for a nested text model): a key is recorded
        # by its path, so a top-level 'sliding_window' is not taken as read because text_config's was
        self.prefix = prefix

    def raw(self, key: str, default: Any = None) -> Any:
        """The value as stated (a builder that checks it itself); the key counts as read."""
        self.seen.add(self.prefix + key)
        return self.data.get(key, default)

    def _fail(self, msg: str) -> UserError:
        return UserError(f"{self.path}: {msg} (model_type {self.model_type!r})")

    def nested(self, key: str, model_type: str | None = None) -> "ConfigReader":
        """The reader of the mapping under ``key`` (a multimodal config's ``text_config``), sharing
        what was read; the caller has checked that it is a mapping."""
        return ConfigReader(self.data[key], self.path, model_type or self.model_type, self.seen,
                            f"{self.prefix}{key}.")

    def integer(self, key: str, default: Any = _MISSING, allow_null: bool = False) -> int | None:
        self.seen.add(self.prefix + key)
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise self._fail(f"missing key {key!r}")
            return default
        if value is None:
            if allow_null:
                return None
            if default is not _MISSING:
                return default
            raise self._fail(f"key {key!r} is null; expected a positive integer")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self._fail(f"key {key!r} must be a positive integer, got {value!r}")
        return value

    def _typed(self, key: str, default, ok, expected: str):
        """The value of an optional key (absent or null: ``default``), refused unless ``ok(value)``."""
        value = self.raw(key, default)
        if value is None:
            return default
        if not ok(value):
            raise self._fail(f"key {key!r} must be {expected}, got {value!r}")
        return value

    def count(self, key: str, default: int) -> int:
        """A count that may be zero (first_k_dense_replace, n_shared_experts)."""
        return self._typed(key, default, lambda v: type(v) is int and v >= 0, "a non-negative integer")

    def flag(self, key: str, default: bool) -> bool:
        return self._typed(key, default, lambda v: isinstance(v, bool), "true or false")

    def number(self, key: str, default: float) -> float:
        return float(self._typed(key, default, lambda v: type(v) in (int, float), "a number"))

    def probability(self, key: str, default: float) -> float:
        """A dropout probability: a number from 0 to 1 (NaN had read as no dropout, 1e308 as dropout)."""
        return float(self._typed(key, default, lambda v: type(v) in (int, float) and 0.0 <= v <= 1.0,
                                 "a probability from 0 to 1"))
