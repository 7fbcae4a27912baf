"""User-facing errors.

Anything a user can cause (unknown model, malformed YAML, degrees that do not divide, bad sizes)
raises :class:`UserError`. The CLI turns it into one line on stderr and exit code 2; library
callers can catch it. Nothing else in llmpar should surface a traceback for bad input.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(ValueError):
    """Bad input: printed as one line, exit code 2."""

    exit_code = 2


class CheckFailed(RuntimeError):
    """A check the user asked for failed (plan found nothing, calibrate check over tolerance): exit 1."""

    exit_code = 1


def suggest(name: str, choices: Iterable[str], n: int = 3) -> str:
    """' (did you mean: a, b?)' for the closest names, or '' when none is close."""
    close = difflib.get_close_matches(name.lower(), list(choices), n=n, cutoff=0.5)
    return f" (did you mean: {', '.join(close)}?)" if close else ""


#: keywords of the CLI that the Python API answers in its result instead (no text to add)
_IN_THE_RESULT = {"explain": "the result's terms (r.terms, with formulas and sources) are the explanation",
                  "json": "r.model_dump() is the --json object", "csv": "r.model_dump() holds every column",
                  "out": "write r.model_dump_json() where you want it"}


def refuse_unknown(func: str, unknown: dict, known: Iterable[str]) -> None:
    """The rule for a keyword a Python API function does not take: a UserError naming it (the
    closest known keyword suggested), not Python's TypeError (docs/api.md: bad input is a
    UserError). Nothing when ``unknown`` is empty."""
    if not unknown:
        return
    name = sorted(unknown)[0]
    why = f": {_IN_THE_RESULT[name]}" if name in _IN_THE_RESULT else suggest(name, known)
    more = f" (and {', '.join(sorted(unknown)[1:])})" if len(unknown) > 1 else ""
    raise UserError(f"{func}() takes no keyword {name!r}{more}{why}")
