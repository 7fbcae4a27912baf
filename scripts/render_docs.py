#!/usr/bin/env python3
"""Run every `llmpar ...` command shown in README.md and docs/*.md; rewrite the shown output.

    python scripts/render_docs.py            # re-run the commands, rewrite the ```console blocks
    python scripts/render_docs.py --check    # exit 1 if a page's output or exit code is stale
    python scripts/render_docs.py README.md docs/memory.md   # only these pages

What a page may show, and what is done with it (tests/test_docs_commands.py imports this module
and runs the same extraction, so the pages and the test cannot disagree on the rules):

- A ```console block: each `$ llmpar ARGS` (or `$ python -m llmpar ARGS`) line is run and the
  lines below it, up to the next `$ ` line or the end of the block, are its output. This script
  rewrites them with what the command prints now; the test requires them to be equal.
- A ```bash / ```sh / ```shell / plain ``` block: every line (or `;`/`&&`/`|`-separated part of a
  line) that starts with `llmpar` or `python -m llmpar` is run for its exit code only.
- A trailing `# exit N` comment on a command line: the command is expected to exit N
  (default 0; `llmpar` exits 1 when a check you asked for failed, 2 on bad input).
- A `# prints: "TEXT"; "TEXT"` comment: each TEXT (a figure the prose around the block quotes)
  must appear in the command's output, runs of spaces and line breaks counted as one space.
- A `# not run: REASON` comment on a command line skips that command; on a line of its own as
  the first line of a block it skips the whole block. Keep these few, each with its reason.
- `VAR=value` before the command sets an environment variable; `> FILE` writes the command's
  stdout to FILE (a later command on the same page can read it); a `|` pipe's receiver is not run.
- A command whose arguments name `../shared/...` (the project's shared validation folder, not
  shipped) is skipped where that folder does not exist.

Commands run in-process through click's CliRunner (no process start per command) with
NO_COLOR=1, TERM=dumb and COLUMNS unset; the CLI's rich tables use their non-terminal widths.
Each page runs in its own scratch directory, in page order (a file one command writes with
`--out` is there for the next), whose entries link to the repository's top-level folders and whose
`../shared` links to the repository's `../shared`, so paths read as they do from the repository
root. The scratch directory's path is replaced by `.` in the output.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
RUN_LANGS = {"", "bash", "sh", "shell", "console"}
# no COLUMNS: the pages show what a pipe prints at each command's own width (cli/render.console:
# 120, plan 140, sweep and validate 150-160); COLUMNS, when set, is honoured instead
ENV = {"NO_COLOR": "1", "TERM": "dumb", "COLUMNS": None}   # None: unset, whatever the shell has

# Figures that change from run to run on the same inputs (wall-clock times of a search or fit).
# They are masked on both sides before the test compares a page's block with the fresh output.
VOLATILE = [
    re.compile(r"\b(in|took) \d+(?:\.\d+)? ?m?s\b"),  # "timed 6,728 in 0.28 s"
    re.compile(r"\d+(?:\.\d+)? ?m?s( in all)\b"),  # "0.44 s in all"
    re.compile(r"\d[\d,]*(?:\.\d+)?( per second)"),  # "(104,843 per second)"
]


# Pages that a command writes whole: page -> llmpar arguments whose stdout is the page.
GENERATED = {"docs/validation.md": ["validate", "--markdown"]}


def generate(rel: str) -> Ran:
    """The fresh text of a generated page (GENERATED)."""
    cmd = Command(REPO / rel, 0, "llmpar " + " ".join(GENERATED[rel]), GENERATED[rel])
    wd = Workdir()
    try:
        return run(cmd, wd, raw=True)
    finally:
        wd.close()


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass
class Command:
    page: Path
    line: int  # 1-based line of the command on the page
    shown: str  # the command as the page shows it
    argv: list[str]  # llmpar's arguments
    env: dict[str, str] = field(default_factory=dict)
    stdout_to: str | None = None
    expect_exit: int = 0
    skip: str | None = None
    prints: list[str] = field(default_factory=list)
    console: bool = False  # in a ```console block: its output is shown and compared
    out_start: int = 0  # 0-based line indexes of the shown output [out_start, out_end)
    out_end: int = 0
    indent: str = ""  # the fence's indentation (a block inside a list item)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def shown_output(self, lines: list[str]) -> str:
        n = len(self.indent)
        return "\n".join(ln[n:] if ln.startswith(self.indent) else ln.lstrip()
                         for ln in lines[self.out_start:self.out_end])


def _split_comment(line: str) -> tuple[str, str]:
    """Code and comment of a shell line: `#` outside quotes after whitespace starts the comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _markers(comment: str) -> tuple[int, str | None]:
    expect, skip = 0, None
    m = re.search(r"\bexit (\d+)\b", comment)
    if m and re.match(r"\s*exit \d+", comment):
        expect = int(m.group(1))
    m = re.search(r"not run:\s*(.+)", comment)
    if m:
        skip = m.group(1).strip()
    return expect, skip


def _prints(comment: str) -> list[str]:
    m = re.search(r"prints:\s*(.+)", comment)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else []


def collapse(text: str) -> str:
    return " ".join(text.split())


def missing_prints(cmd: Command, ran: Ran) -> list[str]:
    out = collapse(ran.output)
    return [t for t in cmd.prints if collapse(t) not in out]


def _commands_of(code: str) -> list[tuple[list[str], dict[str, str], str | None]]:
    """(llmpar argv, env, stdout file) of each llmpar command in one shell line."""
    lex = shlex.shlex(code, posix=True, punctuation_chars=";&|<>")
    lex.whitespace_split = True
    lex.commenters = ""
    try:
        tokens = list(lex)
    except ValueError:
        return []
    segments: list[list[str]] = [[]]
    for tok in tokens:
        if tok in (";", "&&", "||", "|", "&"):
            segments.append([])
        else:
            segments[-1].append(tok)
    found = []
    for seg in segments:
        env = {}
        while seg and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", seg[0]):
            k, v = seg.pop(0).split("=", 1)
            env[k] = v
        if seg[:1] == ["llmpar"]:
            args = seg[1:]
        elif len(seg) >= 3 and re.fullmatch(r"python3?", seg[0]) and seg[1:3] == ["-m", "llmpar"]:
            args = seg[3:]
        else:
            continue
        out, argv, i = None, [], 0
        while i < len(args):
            if args[i] in (">", ">>") and i + 1 < len(args):
                out, i = args[i + 1], i + 2
            elif args[i] in ("2>", "<") or args[i].startswith("2>"):
                i += 2 if args[i] in ("2>", "<") else 1
            else:
                argv.append(args[i])
                i += 1
        found.append((argv, env, out))
    return found


def extract(page: Path) -> list[Command]:
    lines = page.read_text().splitlines()
    cmds: list[Command] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```\s*([\w-]*)", lines[i])
        if not m:
            i += 1
            continue
        lang = m.group(1).lower()
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        start = i + 1
        end = start
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        i = end + 1
        if lang not in RUN_LANGS:
            continue
        block_skip = None
        first = lines[start].strip() if start < end else ""
        if first.startswith("#"):
            _, block_skip = _markers(first.lstrip("# "))
        if lang == "console":
            k = len(indent)
            dollar = [j for j in range(start, end) if lines[j][k:].startswith("$ ")]
            for n, j in enumerate(dollar):
                code, comment = _split_comment(lines[j][k + 2:])
                expect, skip = _markers(comment)
                parsed = _commands_of(code)
                if len(parsed) != 1:
                    raise SystemExit(f"{page}:{j + 1}: a console line must hold one llmpar command")
                argv, env, out = parsed[0]
                stop = dollar[n + 1] if n + 1 < len(dollar) else end
                cmds.append(Command(page, j + 1, lines[j][k + 2:], argv, env, out, expect,
                                    skip or block_skip, _prints(comment), console=True,
                                    out_start=j + 1, out_end=stop, indent=indent))
            continue
        for j in range(start, end):
            code, comment = _split_comment(lines[j])
            if not code.strip():
                continue
            expect, skip = _markers(comment)
            for argv, env, out in _commands_of(code):
                cmds.append(Command(page, j + 1, lines[j].strip(), argv, env, out, expect,
                                    skip or block_skip, _prints(comment)))
    return cmds


def needs_missing_shared(cmd: Command) -> bool:
    return not SHARED.is_dir() and any(a.startswith("../shared") for a in cmd.argv)


@dataclass
class Ran:
    code: int
    output: str  # what a terminal shows: stdout and stderr as written


class Workdir:
    """A scratch directory that reads like the repository root (see the module docstring)."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="llmpar-docs-")
        root = Path(self._tmp.name)
        self.path = root / "work"
        self.path.mkdir()
        for entry in REPO.iterdir():
            if entry.name not in (".git",):
                (self.path / entry.name).symlink_to(entry)
        if SHARED.is_dir():
            (root / "shared").symlink_to(SHARED)

    def close(self) -> None:
        self._tmp.cleanup()


def run(cmd: Command, workdir: Workdir, raw: bool = False) -> Ran:
    from click.testing import CliRunner

    from llmpar.cli.main import main

    argv = []
    for a in cmd.argv:
        hits = sorted(glob.glob(a, root_dir=workdir.path)) if any(c in a for c in "*?[") else []
        argv.extend(hits or [a])
    old = os.getcwd()
    os.chdir(workdir.path)
    err = ""
    try:
        with CliRunner().isolation(env={**ENV, **cmd.env}) as (out, _err, both):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # a traceback is a finding: show it
                import traceback

                code, err = 1, traceback.format_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            stdout, output = out.getvalue().decode(), both.getvalue().decode() + err
    finally:
        os.chdir(old)
    if cmd.stdout_to:
        (workdir.path / cmd.stdout_to).write_text(stdout)
    if raw:
        return Ran(code, stdout)
    for p in {str(workdir.path), str(workdir.path.resolve())}:
        output = output.replace(p + "/", "").replace(p, ".")
    return Ran(code, clean(output))


def clean(text: str) -> str:
    """Trailing spaces off every line, no trailing blank lines."""
    return "\n".join(ln.rstrip() for ln in text.splitlines()).rstrip("\n")


def mask(text: str) -> str:
    for pat in VOLATILE:
        text = pat.sub(lambda m: "<t>" + (m.group(1) or ""), text)
    return text


def run_page(page: Path) -> list[tuple[Command, Ran | None]]:
    wd = Workdir()
    try:
        out = []
        for cmd in extract(page):
            skip = cmd.skip or needs_missing_shared(cmd)
            out.append((cmd, None if skip else run(cmd, wd)))
        return out
    finally:
        wd.close()


def render(page: Path, check: bool = False) -> list[str]:
    """Re-run a page's commands; rewrite its console blocks. Returns the problems found."""
    lines = page.read_text().splitlines()
    problems = []
    edits = []
    for cmd, ran in run_page(page):
        if ran is None:
            continue
        if ran.code != cmd.expect_exit:
            problems.append(f"{cmd.where}: `{cmd.shown}` exited {ran.code}, the page implies "
                            f"{cmd.expect_exit}\n{ran.output[-2000:]}")
        for t in missing_prints(cmd, ran):
            problems.append(f"{cmd.where}: `{cmd.shown}` no longer prints \"{t}\"")
        if cmd.console:
            if mask(clean(cmd.shown_output(lines))) == mask(ran.output):
                continue  # only wall-clock figures differ: leave the page alone
            problems.append(f"{cmd.where}: the output shown for `{cmd.shown}` is stale")
            edits.append((cmd.out_start, cmd.out_end,
                          [cmd.indent + ln if ln else "" for ln in ran.output.splitlines()]))
    if not check:
        for start, end, new in sorted(edits, reverse=True):
            lines[start:end] = new
        text = "\n".join(lines) + "\n"
        if text != page.read_text():
            page.write_text(text)
            print(f"rewrote {page.relative_to(REPO)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", type=Path, help="pages (default: README.md, docs/*.md)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    problems = []
    chosen = [p.resolve() for p in args.pages] or pages()
    for rel in GENERATED:
        if REPO / rel in chosen:
            chosen.remove(REPO / rel)
            fresh = generate(rel)
            if fresh.code != 0:
                problems.append(f"{rel}: llmpar {' '.join(GENERATED[rel])} exited {fresh.code}")
            elif fresh.output != (REPO / rel).read_text():
                if args.check:
                    problems.append(f"{rel}: stale (generated by llmpar {' '.join(GENERATED[rel])})")
                else:
                    (REPO / rel).write_text(fresh.output)
                    print(f"rewrote {rel}")
    for page in chosen:
        problems += render(page, check=args.check)
    for p in problems:
        print(p, file=sys.stderr)
    # Regenerating a page fixes stale output, not a wrong exit code.
    return 1 if problems and (args.check or any("exited" in p for p in problems)) else 0


if __name__ == "__main__":
    sys.exit(main())
