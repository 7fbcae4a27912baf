"""The CLI's options and the API's keywords are one set (issue 24 §1, options declared once): every
option a command declares reaches the API function it calls under the same name, and every API
keyword is an option, except those that only shape the output. A new option added to the CLI but
not to the API (or the reverse) fails here, naming it."""

from __future__ import annotations

import inspect

import click
import pytest

from llmpar import api
from llmpar.cli.main import cli
from llmpar.planner import knobs, search, sweep

# options that shape what a command prints or writes, not what it computes
OUTPUT = {"as_json", "as_csv", "units", "plot_path", "html_path", "trace_path", "explain", "emit", "out"}


def _options(name: str) -> set[str]:
    cmd = cli.get_command(click.Context(cli), name)
    return {p.name for p in cmd.params} - {"model"}   # the positional MODEL is the first argument


def _keywords(fn) -> set[str]:
    return {k for k, p in inspect.signature(fn).parameters.items() if p.kind is not p.VAR_KEYWORD}


@pytest.mark.parametrize("command,fn", [("memory", api.memory), ("step", api.step), ("serve", api.serve)])
def test_the_options_are_the_keywords(command, fn):
    opts, kws = _options(command) - OUTPUT, _keywords(fn) - {"model"}
    assert opts - kws == set(), f"`llmpar {command}` options the API lacks: {sorted(opts - kws)}"
    assert kws - opts <= {"explain"}, f"api.{fn.__name__} keywords with no option: {sorted(kws - opts)}"


def test_plan_options_are_its_keywords_or_its_layout_knobs():
    # plan's layout options (--tp, --zero, ...) travel as **layout and are the knobs --fix names
    opts, kws = _options("plan") - OUTPUT, _keywords(search.plan) - {"model", "keep_points"} - OUTPUT
    assert opts - kws <= set(knobs.KNOBS) | {"offload_layers"}, sorted(opts - kws - set(knobs.KNOBS))
    assert kws - opts == set(), sorted(kws - opts)


def test_every_sweep_option_is_a_sweep_or_plan_keyword():
    opts = _options("sweep") - OUTPUT
    known = _keywords(sweep.sweep) | _keywords(search.plan) | set(knobs.KNOBS) | {"offload_layers"}
    assert opts - known == set(), sorted(opts - known)
    # and plan's own ranking options are refused by sweep, not silently dropped
    assert not (opts & set(sweep._NOT_PLAN_OPTIONS))


def test_the_check_can_fail():
    assert _options("memory") - OUTPUT - (_keywords(api.memory) - {"params"}) == {"params"}
