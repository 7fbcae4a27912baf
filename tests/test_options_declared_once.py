"""The CLI's options and the API's keywords are one set (issue 24 §1, options declared once): every
option a command declares reaches the API function it calls under the same name, and every API
keyword is an option, except those that only shape the output. A new option added to the CLI but
not to the API (or the reverse) fails here, naming it."""

from __future__ import annotations

import inspect

import click

from llmpar.errors import UserError
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


# ---------------------------------------------------------------- the table the options come from

from llmpar import options as O  # noqa: E402


@pytest.mark.parametrize("command,groups", [("memory", "LAYOUT PRECISION"), ("step", "LAYOUT PRECISION OVERLAP"),
                                            ("plan", "PRECISION OVERLAP"), ("sweep", "PRECISION OVERLAP")])
def test_the_shared_options_are_generated_from_the_table(command, groups):
    # every declared option reaches the command with the table's flag, default and help text (plan
    # and sweep take the layout knobs as lists of candidates: space.KNOBS, checked above)
    cmd = cli.get_command(click.Context(cli), command)
    params = {p.name: p for p in cmd.params}
    for o in (o for g in groups.split() for o in getattr(O, g)):
        p = params[o.name]
        assert p.opts[0] == o.flag and p.help == o.help, o.name
        assert p.default == o.default, (o.name, p.default, o.default)


@pytest.mark.parametrize("fn", [api.memory, api.step])
def test_the_api_keywords_take_the_table_defaults(fn):
    # an API default is the table's, or None where the API must tell "not given" from the default
    # (memory's --optimizer/--convention, refused with --inference when typed)
    sig = inspect.signature(fn).parameters
    for o in O.LAYOUT + O.PRECISION:
        assert sig[o.name].default in (o.default, None), (fn.__name__, o.name)


def test_an_option_given_in_a_mode_it_changes_nothing_in_is_refused_by_one_rule():
    # --recompute none and --offload-layers 0 ask for nothing and pass; typed values are named
    O.refuse_moot({"recompute": "none", "offload_layers": 0, "seq": None}, O.ACTIVATIONS, "{flags}")
    with pytest.raises(UserError, match=r"^--recompute, --seq change activations; drop them$"):
        O.refuse_moot({"recompute": "full", "seq": 4096, "tp": 8}, O.ACTIVATIONS,
                      "{flags} change{s} activations; drop {it}")
    with pytest.raises(UserError, match=r"^--sp/--no-sp describes training$"):
        O.refuse_moot({"sp": False, "dtype": "fp8"}, O.TRAINING, "{flags} describe{s} training")


def test_steps_memory_takes_memorys_own_defaults():
    # run.step asks run.memory for the layout's memory with the mode keywords at api.memory's defaults
    from llmpar.run.memory import MODE_DEFAULTS

    sig = {k: p for k, p in inspect.signature(api.memory).parameters.items() if p.kind is not p.VAR_KEYWORD}
    assert MODE_DEFAULTS == {k: sig[k].default for k in MODE_DEFAULTS}
    shared = {o.name for o in O.LAYOUT + O.PRECISION} | {"model", "hardware", "hf"}
    assert set(sig) == shared | set(MODE_DEFAULTS), set(sig) ^ (shared | set(MODE_DEFAULTS))
