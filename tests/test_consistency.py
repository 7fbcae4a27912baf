"""One rule per question, the same in every command (issue 9, items 6, 7 and 9).

Each test failed on main before the fix (reproductions quoted beside each).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import assert_one_line_error
from llmpar import api
from llmpar.cost import memory as M
from llmpar.cost.pipeline import check_schedule
from llmpar.errors import CheckFailed, UserError
from llmpar.parallel import SCHEDULES, Parallel
from llmpar.layout import check_layout, layout_violations
from llmpar.planner import space as SP
from llmpar.specs import load_model


# ------------------------------------------------------------------ item 6: one validation path

@pytest.mark.parametrize("command", ["memory", "step"])
def test_virtual_stages_must_divide_layers_per_stage(cli, command):
    # main: exit 0. Llama-3-70B has 80 layers; pp = 4 gives 20 per stage; v = 3 does not divide 20
    # (Megatron-LM splits a stage into v equal chunks), and the planner never offered it.
    res = cli(command, "llama-3-70b", "--pp", "4", "--virtual-stages", "3", "--json")
    assert_one_line_error(res, "virtual-stages 3", "20 layers per pipeline stage", "2, 4, 5, 10, 20")
    # v = 4 divides 20: accepted (global batch 512 at dp 2: m = 256, a multiple of pp = 4)
    assert cli(command, "llama-3-70b", "--pp", "4", "--virtual-stages", "4", "--json").code == 0


def test_planner_and_check_layout_agree_on_every_layout():
    """Brute force over a small space: a layout is a planner candidate (before memory) exactly when
    check_layout, check_schedule, the batch rule and the convention accept it."""
    from llmpar.specs import load_stack

    model = load_model("llama-3-70b")      # 80 layers, 64 heads, 8 KV heads
    # a stack that implements every schedule, so that all of the planner's schedule rules are exercised
    base = load_stack("megatron-core")
    every = type(base).model_validate({**base.model_dump(), "schedules": list(SCHEDULES)})
    settings = api.make_settings(model, stack=every)
    G, S, B = 16, 8192, 64
    allowed = {"zero": (1,), "recompute": (0,), "micro_batch": (1, 2), "virtual_stages": (1, 2, 3, 4, 5)}
    cand = SP.enumerate_space(model, SP.SpaceSpec(gpus=G, seq=S, global_batch=B, allowed=allowed), settings)
    keys = ("tp", "pp", "dp", "cp", "sp", "micro_batch", "schedule", "virtual_stages")
    got = {tuple(int(getattr(cand.par, k)[i]) for k in keys) for i in range(cand.size)}

    divs = SP.divisors(G)
    want = set()
    for tp, cp, pp, b, sched, v, sp in itertools.product(divs, divs, divs, (1, 2), SP.DEFAULT_SCHEDULES,
                                                         (1, 2, 3, 4, 5), (False, True)):
        if tp == 1 and sp:        # SP at tp = 1 is no SP: one entry
            continue
        if pp == 1 and (sched != SCHEDULES.index("1f1b") or v != 1):   # no pipeline: one schedule entry
            continue
        dp = G // (tp * cp * pp) if G % (tp * cp * pp) == 0 else 0
        if not dp or B % (b * dp):
            continue
        par = Parallel(tp=tp, pp=pp, dp=dp, cp=cp, zero=1, sp=sp, micro_batch=b, microbatches=B // (b * dp),
                       seq=S, schedule=sched, virtual_stages=v)
        try:
            check_layout(model, par)
            check_schedule(sched, pp, B // (b * dp), v)
        except UserError:
            continue
        if not M.convention_allows(settings, 1):
            continue
        want.add((tp, pp, dp, cp, int(sp), b, sched, v))
    assert want and got == want
    # the default stack (Megatron-Core: 1F1B and interleaved only) offers a subset: the same layouts
    # less its missing schedules
    mcore = SP.enumerate_space(model, SP.SpaceSpec(gpus=G, seq=S, global_batch=B, allowed=allowed),
                               api.make_settings(model))
    got_m = {tuple(int(getattr(mcore.par, k)[i]) for k in keys) for i in range(mcore.size)}
    assert got_m == {t for t in want if SCHEDULES[t[6]] in ("1f1b", "interleaved")}
    # v = 3 never divides the 80/pp layers per stage of pp in {2, 4, 8, 16} (40, 20, 10, 5): never offered
    assert not any(t[7] == 3 for t in got)


def test_layout_violations_scalar_equals_array():
    model = load_model("mixtral-8x7b")     # 32 layers, 32 heads, 8 KV heads, 8 experts
    rng = np.random.default_rng(0)
    n = 300
    arr = Parallel(tp=rng.choice([1, 2, 3, 4, 8, 16], n), pp=rng.choice([1, 2, 3, 5, 32, 64], n),
                   dp=rng.choice([1, 2, 4, 6], n), cp=rng.choice([1, 2, 3], n), ep=rng.choice([1, 2, 3, 8, 16], n),
                   zero=rng.choice([0, 1, 3], n), sp=rng.choice([False, True], n), seq=rng.choice([4096, 6000], n),
                   virtual_stages=rng.choice([1, 2, 3, 4], n))
    masks = layout_violations(model, arr)
    for i in range(n):
        one = layout_violations(model, arr.take(i))
        assert {k: bool(v) for k, v in one.items()} == {k: bool(v[i]) for k, v in masks.items()}
        broken = [k for k, v in one.items() if v]
        if broken:
            with pytest.raises(UserError):
                check_layout(model, arr.take(i))
        else:
            check_layout(model, arr.take(i))


@pytest.mark.parametrize("command", [["memory", "llama-3-8b"], ["step", "llama-3-8b"],
                                     ["plan", "llama-3-8b", "--gpus", "8"]])
def test_fp8_on_a100_is_the_same_rule_everywhere(cli, command):
    # main: memory exited 0, step 2. A100 states no FP8 peak (no FP8 tensor cores).
    res = cli(*command, "--dtype", "fp8", "--hardware", "a100-80gb")
    assert_one_line_error(res, "--dtype fp8", "fp8")


def test_plan_nothing_feasible_is_exit_1_one_line(cli):
    # main: exit 2 (bad input). 100,000 GPUs = 2^5 * 5^5 for Llama-3-70B, global batch 512:
    # dp = 100000/(tp*cp*pp) must divide 512 (a power of two), so tp*cp*pp >= 5^5 = 3125, but
    # tp <= 8 (KV heads), pp <= 80 layers and cp must divide 8192 (a power of two): 8 * 80 < 3125.
    res = cli("plan", "llama-3-70b", "--gpus", "100000")
    assert_one_line_error(res, code=1)
    assert "no layout of 100,000 GPUs can run llama-3-70b" in res.err and "global batch not divisible" in res.err


def test_plan_contradictory_fixed_batch_is_still_bad_input(cli):
    assert_one_line_error(cli("plan", "--gpus", "16", "--global-batch", "3", "--fix", "dp=2"), "global batch 3")


def test_seq_beyond_learned_positions_is_said(cli):
    # main: no word. GPT-3 175B has learned positions and max_seq 2048.
    res = cli("memory", "gpt3-175b", "--seq", "4096", "--gpus", "64", "--tp", "8", "--pp", "8", "--json")
    assert res.code == 0, res.err
    notes = " ".join(res.json()["assumptions"])
    assert "exceeds gpt3-175b's maximum 2,048" in notes and "learned" in notes
    res = cli("step", "llama-3-8b", "--seq", "16384", "--json")   # rope: said, differently
    assert "exceeds llama-3-8b's maximum 8,192 (rope positions" in " ".join(res.json()["assumptions"])
    res = cli("plan", "gpt3-175b", "--seq", "4096", "--gpus", "1024", "--json")
    assert any("learned" in a for a in res.json()["assumptions"])


# ------------------------------------------------------------------ item 7: no traceback, no hang

@pytest.mark.parametrize("args, needle", [
    (["step", "llama-3-8b", "--dp", "99999999999999999999"], "--dp"),           # main: OverflowError
    (["memory", "llama-3-8b", "--gpus", "99999999999999999999"], "--gpus"),
    (["step", "llama-3-8b", "--tp", "8", "--dp", "2097152", "--pp", "2"], "tp*cp*pp*dp"),
    (["plan", "--gpus", "99999999999999999999"], "--gpus"),                     # main: hangs on divisors
    (["plan", "--gpus", "4194305"], "4,194,304"),
    (["step", "llama-3-8b", "--seq", str(2**63 - 1)], "--seq"),
    (["step", "llama-3-8b", "--global-batch", str(2**63)], "--global-batch"),
    (["bubble", "--pp", str(2**63), "-m", "8"], "--pp"),
])
def test_absurd_sizes_are_one_line(cli, args, needle):
    assert_one_line_error(cli(*args), needle, "beyond what llmpar models")


def test_bubble_huge_schedule_uses_closed_forms(cli):
    # main: simulated 10^8 slots (53 s and 3.4 GB already at 2000 x 2000). Closed forms:
    # 1F1B bubble over ideal (p-1)/m = 9999/10000; fraction of step (p-1)/(m+p-1) = 9999/19999.
    res = cli("bubble", "--pp", "10000", "-m", "10000", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["bubble_over_ideal"] == pytest.approx(9999 / 10000)
    assert d["bubble_fraction_of_step"] == pytest.approx(9999 / 19999)
    assert d["drawn_idle_fraction"] is None and "not simulated" in d["notes"][-1]
    res = cli("bubble", "--pp", "2000", "-m", "2000")
    assert res.code == 0 and "drawing omitted" in res.out and "0.9995" in res.out   # 1999/2000
    # small schedules are still simulated, and agree with the closed form: 3/(8+3) for p=4, m=8
    assert cli("bubble", "--pp", "4", "-m", "8", "--json").json()["drawn_idle_fraction"] == pytest.approx(3 / 11)


# ------------------------------------------------------------------ item 9: odd inputs that mislead

def test_default_batch_is_capped_and_said(cli):
    # main: 4,194,304 one-token sequences = 4.19 M micro-batches, 652,022 s per step. Now the
    # default is capped at 4,096 sequences (what 4M tokens give at seq 1024), and a note says so.
    d = cli("step", "llama-3-8b", "--gpus", "1", "--seq", "1", "--json").json()
    assert d["parallel"]["global_batch"] == 4096 and d["parallel"]["microbatches"] == 4096
    assert any("capped at 4,096 sequences" in a for a in d["assumptions"])
    # at seq >= 1024 the cap does not bite: 4,194,304 / 8192 = 512 sequences, as before
    d = cli("step", "llama-3-8b", "--gpus", "8", "--json").json()
    assert d["parallel"]["global_batch"] == 512
    assert not any("capped" in a for a in d["assumptions"])


def test_plan_groups_exact_ties():
    # main: the top 10 of llama-3-70b on 512 GPUs held five pairs with identical step time and
    # memory (e.g. dp=32,cp=1 vs dp=8,cp=4 at the same tokens per GPU). One row per group now.
    r = api.plan("llama-3-70b", gpus=512)
    keys = [(p.step_time_s, p.memory_bytes) for p in r.plans]
    for a, b in zip(keys, keys[1:]):
        assert not (a[0] == pytest.approx(b[0], rel=1e-12) and a[1] == pytest.approx(b[1], rel=1e-12))
    assert [p.rank for p in r.plans] == list(range(1, len(r.plans) + 1))
    tied = [p for p in r.plans if p.equivalent]
    assert tied, "llama-3-70b on 512 GPUs has exact ties in its top 10"
    # each listed layout gives the row's numbers through `step` (the same cost functions)
    row = tied[0]
    e = row.equivalent[0].as_dict()
    s = api.step("llama-3-70b", gpus=512, **{k: e[k] for k in ("tp", "pp", "cp", "zero", "sp", "recompute",
                                                                 "micro_batch", "global_batch", "seq", "schedule",
                                                                 "virtual_stages")},
                 recompute_layers=e["recompute_layers"] or None, offload_layers=e["offload_layers"] or None)
    assert s.step_time_s == pytest.approx(row.step_time_s, rel=1e-12)
    assert s.memory.memory["total_bytes"] == pytest.approx(row.memory_bytes, rel=1e-12)
    d = row.to_dict()
    assert isinstance(d["equivalent"], list) and set(d["equivalent"][0]) == set(d["parallel"])


def test_plan_ties_in_json_and_text(cli):
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--objective", "memory", "--json")
    plans = res.json()["plans"]
    assert all("equivalent" in p for p in plans)
    # dp*cp = 1 at tp = 8: ZeRO-0 and ZeRO-1 shard nothing; one row, the other listed
    first = plans[0]
    assert first["parallel"]["zero"] == 0 and [e["zero"] for e in first["equivalent"]] == [1]
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--objective", "memory", "--csv")
    assert "equivalent" in res.out.splitlines()[0] and "zero=1" in res.out
