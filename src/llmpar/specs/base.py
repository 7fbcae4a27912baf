"""The one pydantic configuration every spec model (hardware, model, stack) uses.

- ``extra="forbid"``: a misspelt field is an error naming it, not a silently ignored key.
- ``allow_inf_nan=False``: every float field of every spec, including the values unit parsers
  return (``80 GiB``, ``2 us``) and the per-generation maps (``{default: 0.85, hopper: 0.74}``),
  must be finite: ``.inf`` or ``.nan`` in a YAML file is one error naming the field, never a
  ``nan us per step`` (reliability review, item 2: the class, not the seven fields it found).
- ``defer_build=True``: validators are built on first use (start-up time, docs/cli.md).
"""

from __future__ import annotations

from pydantic import ConfigDict

SPEC = ConfigDict(extra="forbid", defer_build=True, allow_inf_nan=False)
STRICT_SPEC = ConfigDict(extra="forbid", strict=True, defer_build=True, allow_inf_nan=False)
