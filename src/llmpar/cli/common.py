"""The option group shared by `memory`, `step` and `plan` (docs/architecture.md, CLI conventions), and
helpers to print JSON. The options are declared once, in :mod:`llmpar.options` (keyword, flag,
default, domain, help); the click options here are generated from that table, and the API takes the
same keywords (tests/test_options_declared_once.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
import numpy as np

from llmpar.errors import UserError
from llmpar.options import LAYOUT, OVERLAP, PRECISION, Option
from llmpar.specs.registry import DEFAULT_HARDWARE

def click_option(o: Option):
    """The click option for one declared :class:`llmpar.options.Option` (its flag, type, default, help)."""
    kw: dict[str, Any] = {"help": o.help, "default": o.default, "show_default": o.show_default}
    if o.metavar:
        kw["metavar"] = o.metavar
    if o.name in _COMPLETERS:
        kw["shell_complete"] = _COMPLETERS[o.name]
    if o.kind == "bool":
        return click.option(o.shown_flag, **kw)
    if o.kind == "switch":
        return click.option(o.flag, is_flag=True, **kw)
    if o.kind == "choice":
        kw["type"] = click.Choice(o.choices)
    elif o.kind in ("int", "float"):
        kw["type"] = click.IntRange(*o.int_range) if o.int_range else (int if o.kind == "int" else float)
    return click.option(o.flag, **kw)


_COMPLETERS = {"stack": lambda c, p, i: complete_stack(c, p, i)}

_LAYOUT_OPTIONS = [
    click.option("--hardware", "hardware", default=DEFAULT_HARDWARE, show_default=True,
                 shell_complete=lambda c, p, i: complete_hardware(c, p, i),
                 help="Shipped profile name (see `llmpar hardware`) or a YAML path."),
    *(click_option(o) for o in LAYOUT),
]
_PRECISION_OPTIONS = [click_option(o) for o in PRECISION]

_OUTPUT_OPTIONS = [
    click.option("--units", type=click.Choice(["gb", "gib"]), default="gb", show_default=True,
                 help="Memory display unit: GB = 1e9 (the papers'), GiB = 2^30."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
    click.option("--explain", is_flag=True, help="Print each term's formula, inputs and source."),
]


def _apply(options, f):
    for opt in reversed(options):
        f = opt(f)
    return f


_OVERLAP_OPTIONS = [click_option(o) for o in OVERLAP]


def overlap_options(f):
    """Time-model options of `step` and `plan`: communication overlap and rank order."""
    return _apply(_OVERLAP_OPTIONS, f)


def layout_options(f):
    return _apply(_LAYOUT_OPTIONS, f)


def precision_options(f):
    return _apply(_PRECISION_OPTIONS, f)


def output_options(f):
    return _apply(_OUTPUT_OPTIONS, f)


def common_options(f):
    """The whole shared group: layout, precision, output."""
    return layout_options(precision_options(output_options(f)))




def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(_jsonable(obj), indent=2))


def plot_option(what: str):
    """``--plot FILE.png|svg`` (cli/plots.py draws it). The suffix and matplotlib are checked when
    the option is read, before any work: a missing matplotlib is one line naming the extra, exit 2."""

    def check(ctx, param, value):
        if value is None:
            return None
        from llmpar.cli.plots import check_path, require

        path = check_path(value)
        require()
        return path

    return click.option("--plot", "plot_path", default=None, metavar="FILE.png|svg", callback=check,
                        help=f"Also draw {what} into an image (.png or .svg; needs matplotlib: "
                             "pip install 'llmpar[plot]').")


def html_option(what: str):
    """``--html FILE.html`` (cli/report_html.py writes it): the suffix is checked when the option is
    read, before any work; the folder and "not one of the inputs" by :func:`llmpar.outputs.check_out`."""

    def check(ctx, param, value):
        if value is None:
            return None
        path = Path(value)
        if path.suffix.lower() not in (".html", ".htm"):
            raise UserError(f"--html {value}: the report is one HTML page: name it .html")
        from llmpar.outputs import check_out

        check_out(path, option="--html")
        return path

    return click.option("--html", "html_path", default=None, metavar="FILE.html", callback=check,
                        help=f"Also write one self-contained HTML page: {what}; no script, no network.")


# ------------------------------------------------------------------------------ shell completion
# click's own completion (`_LLMPAR_COMPLETE=bash_source llmpar`, docs/cli.md) calls these for MODEL,
# --hardware and --stack: the shipped names and aliases from the registry, or files for a path.

def _complete(kind: str, incomplete: str, *, comma_list: bool = False):
    from click.shell_completion import CompletionItem

    head, sep, word = incomplete.rpartition(",") if comma_list else ("", "", incomplete)
    if "/" in word or word.startswith(".") or word.endswith((".yaml", ".yml", ".json")):
        return [CompletionItem(incomplete, type="file")]
    try:
        from llmpar.specs.registry import spec_index

        names = sorted(spec_index(kind))          # canonical names and aliases
    except Exception:  # noqa: BLE001 - completion must never crash the shell
        return []
    prefix = head + sep
    return [CompletionItem(prefix + n) for n in names if n.startswith(word.lower())]


def complete_model(ctx, param, incomplete: str):
    """Shipped model names and aliases starting with ``incomplete`` (files for a path)."""
    return _complete("models", incomplete)


def complete_hardware(ctx, param, incomplete: str):
    """Shipped hardware profile names (also after a comma: `sweep --hardware h100-sxm,b2<TAB>`)."""
    return _complete("hardware", incomplete, comma_list=True)


def complete_stack(ctx, param, incomplete: str):
    """Shipped stack names and aliases."""
    return _complete("stacks", incomplete)


def guard_outputs(model, kw: dict, outputs: dict) -> None:
    """Every file a command writes (``--out``, ``--plot``, ``--html``, ``--trace``: option -> path or
    None) is checked before any work against the files it reads (a model, HF config, hardware or
    stack given as a path; a comma list of profiles too): never written over an input (reliability
    review, writers: `plan m.yaml --html m.yaml` replaced the model with the report)."""
    from llmpar.outputs import check_out, refuse_same_outputs, spec_inputs

    if not any(outputs.values()):
        return
    refuse_same_outputs(outputs)
    # each spec file and every file of its extends: chain (its bases are inputs too)
    inputs = spec_inputs(("models", model), (None, kw.get("hf")), ("stacks", kw.get("stack")),
                         *(("hardware", h) for h in str(kw.get("hardware") or "").split(",")))
    for option, path in outputs.items():
        check_out(path, inputs=inputs, option=option)


def refuse_moot_outputs(moot: dict[str, bool], chosen: str) -> None:
    """The rule for an output switch the chosen output does not read (issue 24: an option that
    changes nothing in the mode given is refused, not ignored): ``moot`` maps each flag to whether
    it was given (away from its default); ``chosen`` names the output and why, e.g. "--json (bytes
    and seconds)". `step --json --explain`, `memory --json --units gib`, `plan --emit megatron --top 3`
    had printed exactly what they print without it."""
    given = [flag for flag, on in moot.items() if on]
    if given:
        raise UserError(f"{', '.join(given)} change{'s' if len(given) == 1 else ''} nothing with {chosen}: "
                        f"drop {'it' if len(given) == 1 else 'them'}")
