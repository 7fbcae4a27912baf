"""The Python API (issue 10, "The Python API"): ``import llmpar`` gives the commands as functions
taking the CLI's options as keywords, returning pydantic results whose ``model_dump()`` is the
command's ``--json`` object; importing llmpar stays cheap; the api <-> planner circle is gone.

Each key-for-key test runs the CLI in-process (the ``cli`` fixture) with ``--json`` and the API
with the same options, and requires the two objects to be *equal* (every key, every value), apart
from wall-clock timings: stronger than equal keys. tests/test_json_schema.py pins the CLI's keys.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

import llmpar
from llmpar.errors import CheckFailed, UserError

SRC = str(Path(__file__).resolve().parents[1] / "src")
API = ("load_model", "load_hardware", "load_stack", "memory", "step", "plan", "sweep", "collective", "validate")
TIMINGS = {"elapsed_s", "search_s"}   # wall-clock: differ run to run


def _python(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})


def _no_timings(x):
    if isinstance(x, dict):
        return {k: (None if k in TIMINGS else _no_timings(v)) for k, v in x.items()}
    if isinstance(x, list):
        return [_no_timings(v) for v in x]
    return x


def _same_as_cli(cli, result, *args: str) -> dict:
    """``result.model_dump()`` equals ``llmpar ARGS --json``, key for key and value for value."""
    assert isinstance(result, BaseModel)
    res = cli(*args, "--json")
    assert res.code == 0, res.err
    want, got = _no_timings(res.json()), _no_timings(result.model_dump())
    assert _keys(got) == _keys(want)
    assert got == want
    # and the JSON pydantic writes is that object too
    assert _no_timings(json.loads(result.model_dump_json())) == want
    return got


def _keys(x, prefix: str = "") -> set[str]:
    if isinstance(x, dict):
        return {prefix + k for k in x} | {p for k, v in x.items() for p in _keys(v, f"{prefix}{k}.")}
    if isinstance(x, list):
        return {p for v in x for p in _keys(v, prefix + "[].")}
    return set()


# ----------------------------------------------------------------------------- import

def test_import_llmpar_is_cheap():
    """``import llmpar`` loads none of numpy, pydantic, rich, click or the api module: the nine
    names resolve on first use (module ``__getattr__``)."""
    out = _python("import sys, llmpar; print(sorted(m for m in ('numpy', 'pydantic', 'rich', 'click', 'yaml', "
                  "'llmpar.api', 'llmpar.results', 'llmpar.planner.search', 'llmpar.validation.core') if m in sys.modules))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_import_time_of_llmpar_itself():
    """``python -X importtime -c 'import llmpar'``: llmpar alone, a few milliseconds (bounded
    loosely: a loaded machine)."""
    out = _python("import llmpar", "-X", "importtime")
    rows = [ln.split("|") for ln in out.stderr.splitlines() if ln.startswith("import time:") and "|" in ln]
    ours = {r[2].strip(): int(r[1]) for r in rows if r[2].strip().startswith("llmpar")}
    assert set(ours) == {"llmpar"}, ours
    assert ours["llmpar"] < 100_000, ours     # cumulative, microseconds


def test_the_api_names():
    assert set(API) <= set(llmpar.__all__) and set(API) <= set(dir(llmpar))
    from llmpar import api

    for name in API:
        assert callable(getattr(llmpar, name)), name
        assert getattr(llmpar, name) is getattr(api, name), name
    with pytest.raises(AttributeError):
        llmpar.no_such_function  # noqa: B018


def test_no_subpackage_shares_a_name_with_an_api_function():
    """Issue 24: ``llmpar.plan`` and ``llmpar.validate`` are functions; the planner and the
    validation are the subpackages ``llmpar.planner`` and ``llmpar.validation``, so importing
    their modules in any form never hides a function."""
    import pkgutil

    names = {m.name for m in pkgutil.iter_modules(llmpar.__path__)}
    assert not names & set(API), names & set(API)
    code = """
import importlib, sys, types
import llmpar
import llmpar.planner.search
from llmpar.planner import space, sweep
from llmpar.planner.search import PlanResult
import llmpar.validation.core
from llmpar.validation import report
importlib.import_module("llmpar.planner.space")
assert isinstance(llmpar.plan, types.FunctionType) and llmpar.plan is llmpar.api.plan, llmpar.plan
assert isinstance(llmpar.validate, types.FunctionType) and llmpar.validate is llmpar.api.validate
r = llmpar.plan("llama-3-8b", gpus=8, top=1)
assert isinstance(r, PlanResult) and r.best.rank == 1
print("ok")
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_no_import_circle():
    """results and inputs sit below both the API and the planner: the planner never imports the API."""
    imports_api = re.compile(r"^\s*(from\s+llmpar\s+import\s+[^\n]*\bapi\b|from\s+llmpar\.api\b|import\s+llmpar\.api\b)",
                             re.MULTILINE)
    for mod in ("results", "inputs", "planner/search", "planner/sweep", "planner/space", "planner/knobs",
                "planner/arguments", "planner/request", "planner/evaluate", "planner/ranking", "planner/refusals"):
        text = (Path(SRC) / "llmpar" / f"{mod}.py").read_text()
        assert not imports_api.search(text), mod
    out = _python("import llmpar.planner.sweep, sys; print('llmpar.api' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ model_dump() == --json

def test_memory_is_the_cli_json(cli):
    r = llmpar.memory("llama-3-70b", hardware="h100-sxm", zero=3, dp=8)
    got = _same_as_cli(cli, r, "memory", "llama-3-70b", "--hardware", "h100-sxm", "--zero", "3", "--dp", "8")
    # ZeRO-3 of 70.6B params over 8 GPUs: 16 B/param x Psi / 8 (docs/architecture.md errata 004: 140 GB, not 280)
    assert got["gpus"] == 8 and got["parallel"]["zero"] == 3
    states = r.memory["weights_bytes"] + r.memory["gradients_bytes"] + r.memory["optimizer_bytes"]
    assert states == pytest.approx(got["model_states_bytes"])
    assert r.parallel.dp == 8 and r.settings.stack.name == got["settings"]["stack"]


@pytest.mark.parametrize("kw,args", [
    (dict(pp=2, per_stage=True, explain=True, gpus=8), ["--pp", "2", "--per-stage", "--explain", "--gpus", "8"]),
    (dict(inference=True, tp=4, batch=16, context=4096), ["--inference", "--tp", "4", "--batch", "16",
                                                            "--context", "4096"]),
])
def test_memory_variants_are_the_cli_json(cli, kw, args):
    _same_as_cli(cli, llmpar.memory("llama-3-8b", **kw), "memory", "llama-3-8b", *args)


def test_memory_params_is_the_cli_json(cli):
    r = llmpar.memory(params="7.5B", dp=64, zero=3, grad_dtype="bf16")
    _same_as_cli(cli, r, "memory", "--params", "7.5B", "--dp", "64", "--zero", "3", "--grad-dtype", "bf16")
    # ZeRO paper, Fig. 1: 7.5B params, N = 64, stage 3, bf16 grads -> (2+2+12) x 7.5e9 / 64 = 1.875 GB
    assert r.model_states_bytes == pytest.approx(16 * 7.5e9 / 64)


def test_step_is_the_cli_json(cli):
    r = llmpar.step("llama-3-8b", gpus=8, tp=2, global_batch=64, recompute="selective", tokens="1T", pue=1.2,
                    gpu_hour_price=2.5)
    got = _same_as_cli(cli, r, "step", "llama-3-8b", "--gpus", "8", "--tp", "2", "--global-batch", "64",
                       "--recompute", "selective", "--tokens", "1T", "--pue", "1.2", "--gpu-hour-price", "2.5")
    assert got["tokens_per_step"] == 64 * 8192 and "training" in got
    assert r.tokens_per_s * r.step_time_s == pytest.approx(got["tokens_per_step"])


def test_plan_is_the_cli_json(cli):
    r = llmpar.plan("llama-3-8b", gpus=8, top=2, pareto=True, explain_rank=3)
    got = _same_as_cli(cli, r, "plan", "llama-3-8b", "--gpus", "8", "--top", "2", "--pareto", "--explain-rank", "3")
    assert [p["rank"] for p in got["plans"]] == [1, 2] and got["comparison"]["other_rank"] == 3
    assert r.best.step_time_s <= r.plans[1].step_time_s


def test_plan_fix_keywords_are_the_cli_json(cli):
    r = llmpar.plan("llama-3-70b", gpus=64, fix={"tp": 8}, allow="zero=1,3", top=3, tokens="15T")
    _same_as_cli(cli, r, "plan", "llama-3-70b", "--gpus", "64", "--fix", "tp=8", "--allow", "zero=1,3", "--top", "3",
                 "--tokens", "15T")
    assert {p.parallel.tp for p in r.plans} == {8} and {int(p.parallel.zero) for p in r.plans} <= {1, 3}


def test_sweep_is_the_cli_json(cli):
    r = llmpar.sweep("llama-3-8b", gpus=[8, 16], hardware=["h100-sxm", "a100-80gb"], tokens="300B")
    got = _same_as_cli(cli, r, "sweep", "llama-3-8b", "--gpus", "8,16", "--hardware", "h100-sxm,a100-80gb",
                       "--tokens", "300B")
    assert [(row["hardware"], row["gpus"]) for row in got["rows"]] == [
        ("h100-sxm", 8), ("h100-sxm", 16), ("a100-80gb", 8), ("a100-80gb", 16)]
    assert all(row.ok and row.plan.rank == 1 for row in r.rows)


def test_sweep_row_that_cannot_run_is_the_cli_json(cli):
    r = llmpar.sweep("llama-3-70b", gpus=[1, 64], global_batch=32)
    got = _same_as_cli(cli, r, "sweep", "llama-3-70b", "--gpus", "1,64", "--global-batch", "32")
    assert got["rows"][0]["status"] == "does_not_fit" and got["rows"][0]["plan"] is None and got["rows"][0]["reason"]


def test_collective_is_the_cli_json(cli):
    r = llmpar.collective("all-reduce", size="1GiB", gpus=16)
    got = _same_as_cli(cli, r, "collective", "all-reduce", "--size", "1GiB", "--gpus", "16")
    assert got["collective"] == "all_reduce" and got["size_bytes"] == 2**30 and got["nodes"] == 2
    assert r.chosen_row["algorithm"] == r.chosen and r.chosen_row["time_s"] == r.time_s


def test_collective_explain_and_placement_are_the_cli_json(cli):
    # 12 GPUs fill one 8-GPU node and 4 of the next: k = 4 per node, the placement step and plan use
    r = llmpar.collective("all_gather", size=2**28, gpus=12, explain=True)
    got = _same_as_cli(cli, r, "collective", "all-gather", "--size", str(2**28), "--gpus", "12", "--explain")
    assert got["members_per_node"] == 4 and got["explain"]


def test_collective_sweep_is_the_cli_json(cli):
    r = llmpar.collective("reduce-scatter", gpus=8, sweep="1KiB:1MiB", algorithm="ring")
    got = _same_as_cli(cli, r, "collective", "reduce-scatter", "--gpus", "8", "--sweep", "1KiB:1MiB",
                       "--algorithm", "ring")
    assert [row["size_bytes"] for row in got["sweep"]] == [2**k for k in range(10, 21)]
    assert {row["algorithm"] for row in got["sweep"]} == {"ring"}


def test_validate_is_the_cli_json(cli):
    r = llmpar.validate("korthikanti2022-table5", limit=2)
    got = _same_as_cli(cli, r, "validate", "--source", "korthikanti2022-table5", "--limit", "2")
    assert set(got) == {"cross_validation", "rows", "groups", "sources"} and got["rows"]
    assert {g["source"] for g in got["groups"]} == {"korthikanti2022-table5"}


# ------------------------------------------------------------------------ spec objects

def test_loaded_specs_work_wherever_a_name_does():
    model, hw, stack = llmpar.load_model("llama-3-8b"), llmpar.load_hardware("a100-80gb"), \
        llmpar.load_stack("megatron-core")
    by_name = llmpar.step("llama-3-8b", hardware="a100-80gb", stack="megatron-core", gpus=8, tp=2)
    by_obj = llmpar.step(model, hardware=hw, stack=stack, gpus=8, tp=2)
    assert by_obj.model_dump() == by_name.model_dump()
    assert llmpar.memory(model, hardware=hw, gpus=8).model_dump() == llmpar.memory("llama-3-8b", hardware="a100-80gb",
                                                                                   gpus=8).model_dump()
    p_obj, p_name = llmpar.plan(model, hardware=hw, gpus=8, top=1), llmpar.plan("llama-3-8b", hardware="a100-80gb",
                                                                                gpus=8, top=1)
    assert _no_timings(p_obj.model_dump())["plans"] == _no_timings(p_name.model_dump())["plans"]
    s = llmpar.sweep(model, hardware=[hw], gpus=[8])
    assert s.rows[0].plan.model_dump() == p_name.best.model_dump()
    assert llmpar.collective("all-reduce", hardware=hw).model_dump() == \
        llmpar.collective("all-reduce", hardware="a100-80gb").model_dump()
    assert llmpar.load_model(model) is model and llmpar.load_hardware(hw) is hw and llmpar.load_stack(stack) is stack


def test_load_functions():
    m = llmpar.load_model("llama-70b")           # an alias
    assert m.name == "llama-3-70b" and m.layers == 80
    assert llmpar.load_hardware().name == "h100-sxm"
    assert llmpar.load_stack().name == "megatron-core"
    for call in (lambda: llmpar.load_model("no-such-model"), lambda: llmpar.load_hardware("no-such-gpu"),
                 lambda: llmpar.load_stack("no-such-stack"), lambda: llmpar.load_model()):
        with pytest.raises(UserError):
            call()


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("call", [
    lambda: llmpar.memory("llama-3-8b", zero=5),
    lambda: llmpar.memory("llama-3-8b", gpus=8, tp=3),
    lambda: llmpar.step(),
    lambda: llmpar.plan("llama-3-8b"),
    lambda: llmpar.plan("llama-3-8b", gpus=8, no_such_option=1),
    lambda: llmpar.sweep("llama-3-8b", gpus="8,x"),
    lambda: llmpar.collective("all-reduce", gpus=1),
    lambda: llmpar.collective("all-reduce", size="1GiB", sweep="1KiB:1MiB"),
    lambda: llmpar.collective("all-reduce", gpus="8"),
    lambda: llmpar.validate("no-such-source"),
    lambda: llmpar.validate("korthikanti2022-table5", tolerance="ten"),
])
def test_bad_input_raises_user_error(call):
    with pytest.raises(UserError):
        call()


def test_nothing_feasible_raises_check_failed():
    with pytest.raises(CheckFailed, match="no layout fits"):
        llmpar.plan("llama-3.1-405b", gpus=1)
    with pytest.raises(CheckFailed, match="mean .error. above"):
        llmpar.validate("korthikanti2022-table5", limit=2, tolerance="0.0001%")
    r = llmpar.validate("korthikanti2022-table5", limit=2, tolerance="1000%")   # within: the result
    assert not r.over_tolerance(10.0)


def test_results_keep_their_objects():
    """A result is a pydantic model that keeps the layout and settings objects it was built from."""
    from llmpar.parallel import Parallel, Settings
    from llmpar.results import MemoryResult, StepResult
    from llmpar.results_plan import PlanResult, PlanRow, SweepResult

    s = llmpar.step("llama-3-8b", gpus=8)
    assert isinstance(s, StepResult) and isinstance(s.memory, MemoryResult)
    assert isinstance(s.parallel, Parallel) and isinstance(s.settings, Settings) and s.gpus == 8
    p = llmpar.plan("llama-3-8b", gpus=8, top=1)
    assert isinstance(p, PlanResult) and isinstance(p.best, PlanRow) and p.best.fits
    w = llmpar.sweep("llama-3-8b", gpus=8)
    assert isinstance(w, SweepResult) and w.any_ok and w.rows[0].scaling_efficiency == 1.0
    with pytest.raises(ValueError):      # pydantic checks the fields' types
        PlanRow(**{**dict(p.best), "parallel": "tp=8"})
