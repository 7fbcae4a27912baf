"""Shared test helpers.

`cli` runs the real entry point (`llmpar.cli.main.main`) in-process, so exit codes and the one-line
error contract are tested exactly as a user sees them, without a process start per test.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60)
settings.register_profile("dev", deadline=None, max_examples=60)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# the validated-spec cache (llmpar/specs/cache.py) stays out of the suite's way: no test writes to
# the user's ~/.cache; tests/test_spec_cache.py turns it on in a temporary directory
os.environ.setdefault("LLMPAR_NO_CACHE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def cli(capsys):
    from llmpar.cli.main import main

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def assert_one_line_error(res: Result, *needles: str, code: int = 2) -> None:
    """Bad input (exit 2), or with ``code=1`` a valid question with no answer (nothing fits):
    that exit code, exactly one line on stderr, no traceback, mentioning each needle."""
    assert res.code == code, (res.code, res.out, res.err)
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1, res.err
    assert "Traceback" not in res.err
    for needle in needles:
        assert needle.lower() in res.err.lower(), (needle, res.err)
