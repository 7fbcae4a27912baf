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
