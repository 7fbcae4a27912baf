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
# piped output is COLUMNS wide when the environment sets it (cli/render.console): the suite's pages
# and tables are checked at the 120 columns of a pipe without it, whatever the shell exports
os.environ.pop("COLUMNS", None)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# pytest-xdist (`--dist loadfile`, pyproject.toml) runs each file's tests on one worker, so a module
# fixture is built once. These files all ask for the full `validate` or `validate --serving`
# (seconds each, kept per process by validation/core.py and serving/report.py), so they go to one
# worker as one unit and each is computed once (docs/testing.md, Time budget). Done with xdist's
# scheduler hook: its `xdist_group` marks do not reach the scheduler under pytest 9.2 (the worker
# renames `item._nodeid`, which `item.nodeid` no longer reads).
SHARED_VALIDATION = {"test_docs_commands.py", "test_docs_validation_page.py", "test_evidence.py",
                     "test_serving_evidence.py", "test_docs_serving_page.py", "test_report_html.py"}


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndTheValidationUnit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return "validation" if Path(file).name in SHARED_VALIDATION else file

    return FilesAndTheValidationUnit(config, log)


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
