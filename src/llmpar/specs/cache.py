"""The validated-spec cache: a spec mapping validated once is read back, not validated again.

Validating a hardware profile, a stack and a model builds pydantic's validators for their classes,
which is most of what `llmpar memory` spends beyond importing its dependencies (docs/cli.md,
start-up time). The cache stores the validated object under a key made of the class, the mapping
itself (after `extends:` merging, so any edit to any file in the chain is a different key) and a
fingerprint of the code that validates it (pydantic's version and the source of
`llmpar/specs/*.py` and `llmpar/units.py`): a stale entry cannot be hit, only never used again.

Where: ``$LLMPAR_CACHE_DIR``, else ``$XDG_CACHE_HOME/llmpar``, else ``~/.cache/llmpar``.
``LLMPAR_NO_CACHE=1`` turns it off. A cache that cannot be read or written is a miss: the spec is
validated as if there were none (nothing about the result changes, only the time).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any


def _dir() -> Path | None:
    if os.environ.get("LLMPAR_NO_CACHE"):
        return None
    base = os.environ.get("LLMPAR_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "llmpar"
    try:
        return Path.home() / ".cache" / "llmpar"
    except (RuntimeError, KeyError, OSError):   # no home directory: no cache
        return None


@functools.lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    import pydantic

    here = Path(__file__).resolve().parent
    # the validating code itself is hashed below; llmpar states no __version__ of its own to add
    h = hashlib.sha256(f"pydantic {pydantic.VERSION}".encode())
    for path in sorted(here.glob("*.py")) + [here.parent / "units.py"]:
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"?")
    return h.hexdigest()


def key(cls: type, data: dict[str, Any]) -> str | None:
    if _dir() is None:
        return None
    try:
        text = json.dumps(_tagged(data), sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return None
    h = hashlib.sha256(f"{cls.__module__}.{cls.__qualname__}|{_code_fingerprint()}|{text}".encode())
    return h.hexdigest()


def _tagged(x):
    """The mapping with every value's type in the key (reliability review, item 23: a YAML date and
    the string of it, or an int key and its string, hashed the same, so a cached valid spec let
    an invalid one through): scalars become [type name, value], mapping keys "type:key"."""
    if isinstance(x, dict):
        return {f"{type(k).__name__}:{k}": _tagged(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [type(x).__name__, [_tagged(v) for v in x]]
    if x is None or isinstance(x, (bool, int, float, str)):
        return [type(x).__name__, x if not isinstance(x, float) or x == x else "nan"]
    return [type(x).__name__, repr(x)]


def get(k: str | None):
    if k is None:
        return None
    try:
        with open(_dir() / f"{k}.pickle", "rb") as f:
            return pickle.load(f)  # noqa: S301 - the user's own cache directory, written by put()
    except Exception:   # missing, unreadable, truncated, from another Python: a miss
        return None


def put(k: str | None, obj) -> None:
    if k is None:
        return
    d = _dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f"{k}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, d / f"{k}.pickle")
    except Exception:   # read-only home, full disk: the next run validates again
        return
