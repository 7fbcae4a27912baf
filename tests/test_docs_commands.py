"""Docs that cannot rot: every `llmpar ...` command in README.md and docs/*.md is run here.

The extraction and the rules live in scripts/render_docs.py (its docstring), which this test
imports, so the page, the renderer and the test read a page the same way:

- a ```console block's `$ llmpar ...` lines are run and the output shown below each must equal
  what the command prints now (wall-clock figures such as a search's "in 0.28 s" masked);
- every `llmpar ...` in a ```bash / plain block is run for its exit code (0 unless `# exit N`);
- `# prints: "TEXT"` on a command: the figures the prose quotes appear in its output;
- `# not run: REASON` skips a command (few, each with its reason: test_skips_are_few_and_said);
- docs/validation.md must be what `llmpar validate --markdown` prints now.

A failure here means a page is stale: `python scripts/render_docs.py` rewrites the outputs (and
docs/validation.md); a wrong exit code or a traceback needs the page or the code fixed.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("render_docs", REPO / "scripts" / "render_docs.py")
rd = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("render_docs", rd)  # dataclasses look their module up
_spec.loader.exec_module(rd)

CASES = [(page, i, cmd) for page in rd.pages() for i, cmd in enumerate(rd.extract(page))]
FIX = "run `python scripts/render_docs.py` to rewrite the page's outputs"
# the pages whose commands take longest run from their own test files (tests/test_docs_*.py), so
# pytest-xdist can put docs/planner.md on another worker (docs/serving.md shares this file's worker:
# both ask for `validate --serving`, tests/conftest.py SHARED_VALIDATION; docs/testing.md, Time budget)
SHARDS = {"docs/planner.md": "planner", "docs/serving.md": "serving"}


def shard_of(page: Path) -> str:
    return SHARDS.get(page.relative_to(REPO).as_posix(), "")


def cases(shard: str = ""):
    return [(p, i) for p, i, _ in CASES if shard_of(p) == shard], [c.where for p, _, c in CASES if shard_of(p) == shard]


@functools.lru_cache(maxsize=None)
def _page_results(page: Path):
    return rd.run_page(page)


@pytest.mark.parametrize("page,index", cases()[0], ids=cases()[1])
def test_page_command(page, index):
    check_page_command(page, index)


def check_page_command(page, index):
    cmd, ran = _page_results(page)[index]
    if cmd.skip:
        pytest.skip(f"not run: {cmd.skip}")
    if ran is None:
        pytest.skip("needs ../shared (the project's shared validation folder), absent here")
    assert "Traceback" not in ran.output, f"{cmd.where}: `{cmd.shown}` raised\n{ran.output}"
    assert ran.code == cmd.expect_exit, (
        f"{cmd.where}: `{cmd.shown}` exited {ran.code}, the page implies {cmd.expect_exit} "
        f"(mark it `# exit {ran.code}` if that is what it should do)\n{ran.output[-3000:]}"
    )
    missing = rd.missing_prints(cmd, ran)
    assert not missing, f"{cmd.where}: `{cmd.shown}` no longer prints {missing}: fix the prose"
    if cmd.console:
        shown = rd.mask(rd.clean(cmd.shown_output(page.read_text().splitlines())))
        fresh = rd.mask(ran.output)
        if shown != fresh:
            diff = "\n".join(difflib.unified_diff(
                shown.splitlines(), fresh.splitlines(), "page", "now", lineterm="", n=1))
            pytest.fail(f"{cmd.where}: the output shown for `{cmd.shown}` is stale; {FIX}\n{diff}")


def test_pages_have_commands():
    """The extraction finds the README's tour and console blocks on the docs pages."""
    readme = [c for p, _, c in CASES if p.name == "README.md"]
    assert sum(c.console for c in readme) >= 6, "the README's 60-second tour should be console blocks"
    assert {c.argv[0] for c in readme if c.console} >= {
        "memory", "step", "plan", "sweep", "calibrate", "validate"}
    assert sum(c.console for _, _, c in CASES) >= 10


def test_no_command_is_missed():
    """A command line the extraction would not run is a page mistake (e.g. `$ llmpar` in a
    ```bash block, or a command in a language it does not read; ```text holds synopses)."""
    problems = []
    for page in rd.pages():
        lines = page.read_text().splitlines()
        lang, inside = None, False
        for n, line in enumerate(lines, 1):
            m = re.match(r"^\s*```\s*([\w-]*)", line)
            if m:
                inside = not inside
                lang = m.group(1).lower() if inside else None
                continue
            if not inside:
                continue
            s = line.strip()
            if lang != "console" and s.startswith("$ llmpar"):
                problems.append(f"{page.name}:{n}: `$ llmpar` outside a ```console block")
            if lang not in rd.RUN_LANGS | {"text"} and s.startswith("llmpar "):  # text: a synopsis
                problems.append(f"{page.name}:{n}: command in a ```{lang} block is not run")
    assert not problems, "\n".join(problems)


def test_skips_are_few_and_said():
    skipped = [c for _, _, c in CASES if c.skip]
    for c in skipped:
        assert len(c.skip) >= 20, f"{c.where}: say why it is not run"
    assert len(skipped) <= 15, [c.where for c in skipped]


def check_validation_page_is_generated():
    """docs/validation.md is `llmpar validate --markdown`, not written by hand (about 3 s)."""
    fresh = rd.generate("docs/validation.md")
    assert fresh.code == 0
    page = (REPO / "docs" / "validation.md").read_text()
    if fresh.output != page:
        diff = "\n".join(list(difflib.unified_diff(
            page.splitlines(), fresh.output.splitlines(), "page", "now", lineterm="", n=0))[:40])
        pytest.fail(f"docs/validation.md is stale; {FIX}\n{diff}")
