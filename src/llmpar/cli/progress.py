"""One progress bar for long work (`sweep` over many counts, `calibrate runs`, `validate`).

On a terminal, and only when the output is not a machine format (``--json``, ``--csv``, a
Markdown page on stdout), a transient rich bar shows while the work runs and is erased when it
ends; on a pipe, a file or under CliRunner it is nothing at all, so only the result is printed.

    with progress_bar("sweep", enabled=not as_json) as tick:
        result = run_sweep(..., progress=tick)      # tick(name, done, total), or None

The work itself (``plan.sweep``, ``calibrate.runs``, ``validate.core``) takes an optional
``progress(name, done, total)`` callback and never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Tick = Callable[[str, int, int], None]


def wanted(enabled: bool = True, console=None) -> bool:
    """A bar is drawn only on a terminal, and only when the caller allows it."""
    if not enabled:
        return False
    if console is None:
        from llmpar.cli.render import console as make

        console = make()
    return bool(console.is_terminal)


@contextmanager
def progress_bar(label: str, *, enabled: bool = True, console=None) -> Iterator[Tick | None]:
    """Yield ``tick(name, done, total)`` driving a transient bar, or None when no bar is wanted
    (not a terminal, or ``enabled`` false): pass it on as the work's ``progress`` callback."""
    if console is None:
        from llmpar.cli.render import console as make

        console = make()
    if not wanted(enabled, console):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(label, total=None)

        def tick(name: str, done: int, total: int) -> None:
            bar.update(task, total=total, completed=done, description=f"{label} {name}".rstrip())

        yield tick
