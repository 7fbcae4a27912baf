"""The ``llmpar`` command: a click group whose subcommands are imported only when used.

Errors a user can cause end in one line on stderr and exit 2 (docs/architecture.md, exit codes); a check
the user asked for that fails is exit 1; a computed result (even DOES NOT FIT) is exit 0.
"""

from __future__ import annotations

import importlib
import sys

import click

from llmpar.errors import CheckFailed, UserError

# name -> (module, attribute, one-line help). Modules load lazily so `llmpar --help` stays fast.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "models": ("llmpar.cli.specs_cmd", "models", "List shipped models; `models show NAME` for one."),
    "hardware": ("llmpar.cli.specs_cmd", "hardware", "List shipped hardware profiles; `hardware show NAME`."),
    "stacks": ("llmpar.cli.stacks_cmd", "stacks", "List shipped framework profiles (stacks); `stacks show NAME`."),
    "engines": ("llmpar.cli.engines_cmd", "engines", "List shipped serving engines; `engines show NAME`."),
    "memory": ("llmpar.cli.memory_cmd", "memory", "Per-GPU memory for training or inference, and whether it fits."),
    "collective": ("llmpar.cli.collective_cmd", "collective", "Time, algbw and busbw of one collective per algorithm."),
    "bubble": ("llmpar.cli.bubble_cmd", "bubble", "Draw a pipeline schedule and its bubble ratios."),
    "step": ("llmpar.cli.step_cmd", "step", "Step time, tokens/s, MFU and where the time goes."),
    "plan": ("llmpar.cli.plan_cmd", "plan", "Search TP/PP/DP/CP/EP layouts for N GPUs."),
    "sweep": ("llmpar.cli.sweep_cmd", "sweep", "Plan a list of GPU counts (and profiles): days, GPU-hours, energy, cost."),
    "serve": ("llmpar.cli.serve_cmd", "serve", "Serving on paper: TTFT, TPOT, throughput and KV capacity of one deployment."),
    "serve-plan": ("llmpar.cli.serve_plan_cmd", "serve_plan", "Search serving deployments for the cheapest that meets TTFT/TPOT targets."),
    "calibrate": ("llmpar.cli.calibrate_cmd", "calibrate", "Fit the collective model to nccl-tests logs, a stack to your training runs, an engine to your serving benchmarks."),
    "validate": ("llmpar.cli.validate_cmd", "validate", "Published vs predicted for the shipped published runs."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        try:
            return getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("llmpar"):
                return _missing(name)
            raise

    def format_commands(self, ctx, formatter):
        rows = [(name, help_) for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _missing(name: str) -> click.Command:
    @click.command(name=name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    def cmd():
        raise UserError(f"`llmpar {name}` is not available in this version")

    return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="llmpar")
def cli():
    """llmpar - plan distributed LLM training and serving on paper.

    Will the model fit, how long will a step take, where does the time go, and which
    TP/PP/DP/CP/EP layout is best for N GPUs? Every number shows its formula and source
    (--explain). The framework is an input (--stack; `llmpar stacks`): fit one to your own
    training runs (`calibrate runs`) and the network to your NCCL measurements (`calibrate fit`).

    Shell completion (commands, options, shipped model/hardware/stack names):
    eval "$(_LLMPAR_COMPLETE=bash_source llmpar)" in ~/.bashrc (zsh_source, fish_source: docs/cli.md).
    """


# what the renderers print beyond ASCII, and what a console that cannot show it gets instead
_ASCII = {"·": "-", "█": "#", "▏": "|", "▎": "|", "▍": "|", "▌": "|", "▋": "|", "▊": "|", "▉": "|", "−": "-",
          "–": "-", "—": "-", "…": "...", "±": "+/-", "×": "x", "≤": "<=", "≥": ">=", "≈": "~", "²": "^2",
          "³": "^3", "Ψ": "Psi", "α": "alpha", "β": "beta", "→": "->", "━": "-", "─": "-", "│": "|", "┃": "|",
          "┏": "+", "┓": "+", "┗": "+", "┛": "+", "┡": "+", "┩": "+", "╇": "+", "┳": "+", "┻": "+", "╋": "+",
          "└": "+", "┘": "+", "┌": "+", "┐": "+", "├": "+", "┤": "+", "┼": "+", "┬": "+", "┴": "+", "°": " deg"}


def _ascii_fallback(err: UnicodeEncodeError):
    bad = err.object[err.start:err.end]
    return "".join(_ASCII.get(ch, "?") for ch in bad), err.end


def _safe_streams() -> None:
    """A console whose encoding cannot show the renderers' characters (``PYTHONIOENCODING=ascii``,
    a cp1252 Windows console) gets ASCII stand-ins instead of a UnicodeEncodeError traceback
    (reliability review, item 11)."""
    import codecs

    try:
        codecs.lookup_error("llmpar-ascii")
    except LookupError:
        codecs.register_error("llmpar-ascii", _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if enc and enc not in ("utf8", "utf16", "utf32") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="llmpar-ascii")
            except (ValueError, OSError):     # a stream that cannot be reconfigured keeps its own rule
                pass


def _quiet_broken_pipe() -> None:
    """stdout's reader went away (``llmpar plan ... | head -1``): point stdout at /dev/null so
    the interpreter's final flush does not fail again, and exit 0 (reliability review, item 14:
    it used to exit 1, the "nothing feasible" code, under ``set -o pipefail``)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI, turning user errors into one line and exit 2."""
    _safe_streams()
    try:
        rv = cli.main(args=argv, prog_name="llmpar", standalone_mode=False)
    except UserError as exc:
        click.echo(f"llmpar: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except CheckFailed as exc:
        click.echo(f"llmpar: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a group called bare shows its help
            click.echo(exc.format_message())
            sys.exit(0)
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        click.echo(f"llmpar: error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"llmpar: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code or 2)
    except click.exceptions.Abort:
        click.echo("llmpar: aborted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _quiet_broken_pipe()
    try:
        sys.stdout.flush()            # a pipe closed after the last write shows here
    except BrokenPipeError:
        _quiet_broken_pipe()
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
