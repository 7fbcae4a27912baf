"""Held knobs that contradict each other are bad input (exit 2, one line), as `step` refuses the
same layout, not a search that found nothing (newcomer review: `plan --fix sp=1,tp=1` exited 1
"every one of the 2,430 candidates breaks a rule"). planner/space.RULE_KNOBS names the rules
that read only held knobs."""

import pytest

from tests.conftest import assert_one_line_error


@pytest.mark.parametrize("args, needles", [
    (("--fix", "sp=1,tp=1"), ("sp=on, tp=1", "sequence parallelism")),
    (("--allow", "tp=1", "--allow", "sp=on"), ("sp=on, tp=1",)),
    (("--fix", "zero=3,pp=2", "--stack", "deepspeed"), ("zero=3, pp=2", "does not launch")),
])
def test_plan_contradictory_held_knobs_exit_2(cli, args, needles):
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "8", *args), *needles)


def test_plan_held_knob_with_a_free_partner_still_searches(cli):
    """sp on with tp 1 or 2 allowed: tp 2 runs, so the plan answers (exit 0)."""
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--fix", "sp=1", "--allow", "tp=1,2", "--json")
    assert res.code == 0, res.err
    assert {row["parallel"]["tp"] for row in res.json()["plans"]} == {2}


def test_plan_nothing_valid_without_held_contradiction_is_exit_1(cli):
    """7 GPUs, pp held at 1: tp 7 does not divide 32 heads, cp 7 does not divide seq 8,192, dp 7
    does not divide 512 sequences. Several rules, none of held knobs alone: a valid request with
    nothing feasible (exit 1)."""
    res = cli("plan", "llama-3-8b", "--gpus", "7", "--global-batch", "512", "--allow", "pp=1")
    assert_one_line_error(res, "breaks a rule", code=1)


def test_sweep_contradictory_held_knobs_exit_2(cli):
    res = cli("sweep", "llama-3-8b", "--gpus", "8,16", "--fix", "sp=1,tp=1")
    assert_one_line_error(res, "sequence parallelism")
