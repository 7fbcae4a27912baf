"""Shell completion of names (click's own completion: docs/cli.md) and the progress bar's silence
off a terminal (issue 10, "Plots and the terminal")."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from llmpar.cli.common import complete_hardware, complete_model, complete_stack
from llmpar.cli.main import cli as llmpar_cli
from llmpar.specs import shipped_names


def _values(items) -> list[str]:
    return [i.value for i in items]


def test_model_names_complete_from_the_registry():
    got = _values(complete_model(None, None, "llama-3-"))
    assert {"llama-3-8b", "llama-3-70b"} <= set(got)
    assert all(v.startswith("llama-3-") for v in got)
    assert set(shipped_names("models")) <= set(_values(complete_model(None, None, "")))
    assert _values(complete_model(None, None, "LLAMA-3-8")) == ["llama-3-8b"]   # names are case-insensitive
    assert complete_model(None, None, "no-such-model") == []


def test_hardware_and_stack_names_complete():
    assert "h100-sxm" in _values(complete_hardware(None, None, "h1"))
    # sweep takes a comma list: complete the last item, keep the ones before
    after = _values(complete_hardware(None, None, "h100-sxm,a100"))
    assert after and all(v.startswith("h100-sxm,a100") for v in after)
    assert "megatron-core" in _values(complete_stack(None, None, "mega"))
    assert set(shipped_names("stacks")) <= set(_values(complete_stack(None, None, "")))


def test_a_path_completes_as_a_file():
    (item,) = complete_model(None, None, "./my-model.yaml")
    assert item.type == "file"


def test_the_commands_wire_the_callbacks():
    """MODEL and --hardware/--stack of the commands use the callbacks (through click's completion API)."""
    from click.shell_completion import ShellComplete

    def complete(args: list[str], incomplete: str) -> list[str]:
        sc = ShellComplete(llmpar_cli, {}, "llmpar", "_LLMPAR_COMPLETE")
        return [c.value for c in sc.get_completions(args, incomplete)]

    assert "llama-3-70b" in complete(["memory"], "llama-3-7")
    assert "llama-3-70b" in complete(["plan"], "llama-3-7")
    assert "llama-3-70b" in complete(["step"], "llama-3-7")
    assert "llama-3-70b" in complete(["sweep"], "llama-3-7")
    assert "h100-sxm" in complete(["plan", "--hardware"], "h100")
    assert "h100-sxm" in complete(["memory", "llama-3-8b", "--hardware"], "h100")
    assert "megatron-core" in complete(["step", "llama-3-8b", "--stack"], "megatron")
    assert "h100-sxm,b200" in complete(["sweep", "--hardware"], "h100-sxm,b200") or \
        any(v.startswith("h100-sxm,b200") for v in complete(["sweep", "--hardware"], "h100-sxm,b2"))


# -------------------------------------------------------------------------------- progress bar

def test_progress_helper_is_silent_off_a_terminal():
    from rich.console import Console

    from llmpar.cli.progress import progress_bar, wanted

    import io

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=False)
    assert not wanted(True, con)
    with progress_bar("x", console=con) as tick:
        assert tick is None
    term = Console(file=io.StringIO(), force_terminal=True)
    assert wanted(True, term) and not wanted(False, term)
    with progress_bar("x", console=term) as tick:
        tick("a", 1, 2)   # drives a bar on a terminal
    assert buf.getvalue() == ""


@pytest.mark.parametrize("args", [
    ["sweep", "llama-3-8b", "--gpus", "8,16", "--json"],
    ["sweep", "llama-3-8b", "--gpus", "8,16"],
])
def test_sweep_prints_only_the_result_under_clirunner(args):
    """CliRunner is not a TTY: no bar, nothing but the result on stdout (and nothing on stderr)."""
    res = CliRunner().invoke(llmpar_cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    if "--json" in args:
        json.loads(res.stdout)   # the JSON object alone
    else:
        assert res.stdout.lstrip().startswith(("defaults used", "sweep"))
        assert "\r" not in res.stdout and "━" not in res.stdout


def test_calibrate_runs_prints_only_the_result_under_clirunner(tmp_path):
    import yaml

    from llmpar.calibrate import runs_parameters as RP
    from llmpar.specs import load_stack
    from test_calibrate_runs import synthetic_runs

    runs = synthetic_runs(RP.stack_with(load_stack("megatron-core"), {"kernels.gemm_efficiency": 0.7}, "hopper"))
    table = tmp_path / "runs.yaml"
    table.write_text(yaml.safe_dump({"hardware": "h100-sxm", "runs": [
        {"model": r.model, **r.layout, "step_time_s": r.step_time_s} for r in runs]}))
    res = CliRunner().invoke(llmpar_cli, ["calibrate", "runs", str(table), "--fit", "kernels.gemm_efficiency",
                                          "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["stack"] == "megatron-core"


def test_the_work_reports_progress_through_its_callback():
    from llmpar.planner.sweep import sweep

    seen = []
    sweep("llama-3-8b", gpus="8,16", hardware="h100-sxm,a100-80gb", progress=lambda *a: seen.append(a))
    assert [(d, t) for _, d, t in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert seen[0][0] == "h100-sxm x 8"


def test_completion_is_named_in_help_and_readme(cli):
    """Newcomer review: completion was documented only in docs/cli.md."""
    from pathlib import Path

    res = cli("--help")
    assert res.code == 0
    assert "_LLMPAR_COMPLETE=bash_source llmpar" in res.out
    assert "_LLMPAR_COMPLETE=bash_source llmpar" in (Path(__file__).parents[1] / "README.md").read_text()
