"""Held knobs that contradict each other are bad input (exit 2, one line), as `step` refuses the
same layout, not a search that found nothing (newcomer review: `plan --fix sp=1,tp=1` exited 1
"every one of the 2,430 candidates breaks a rule"). planner/reasons.RULE_KNOBS names the rules
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


@pytest.mark.parametrize("args, needles", [
    # fuzz review 2026-12-04: each exited 1 ("every one of the candidates breaks a rule") because an
    # unrelated rule also took a few candidates, or because only one of the rule's knobs was held;
    # `step` refuses each of these layouts (exit 2). A rule that rejects every candidate on its own
    # and reads a held knob is now the contradiction
    (("--finetune", "lora", "--fix", "tp=8"), ("tp=8", "LoRA/QLoRA is modelled data-parallel only")),
    (("--finetune", "qlora", "--fix", "cp=2"), ("cp=2", "data-parallel only")),
    (("--optimizer-offload", "0.5", "--zero", "0"), ("zero=0", "ZeRO 0 has none")),
    (("--param-offload", "--stack", "deepspeed", "--fix", "zero=1"), ("zero=1", "below ZeRO 3")),
    (("--convention", "megatron", "--fix", "zero=3"), ("zero=3", "--convention")),
    (("--fix", "schedule=gpipe,pp=1"), ("schedule=gpipe, pp=1", "schedule cannot run it")),
    (("--fix", "schedule=interleaved,virtual_stages=1"), ("virtual_stages=1", "schedule cannot run it")),
])
def test_a_held_knob_that_one_rule_refuses_everywhere_is_exit_2(cli, args, needles):
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "16", *args), *needles)


def test_sp_on_tp_1_on_an_moe_model_is_exit_2_as_on_a_dense_one(cli):
    """mixtral: the ep rule also took candidates, which had hidden the sp/tp contradiction (exit 1)."""
    assert_one_line_error(cli("plan", "mixtral-8x7b", "--gpus", "16", "--fix", "sp=on,tp=1"), "sp=on, tp=1")


@pytest.mark.parametrize("args, needle", [
    # fuzz review 2026-12-04: messages in the user's spelling, not the internal codes and not "--fix"
    # for an option given as --allow or --tp
    (("--schedule", "gpipe", "--fix", "schedule=1f1b"), "--schedule gpipe contradicts --fix schedule=1f1b"),
    (("--recompute", "full", "--fix", "recompute=none"), "--recompute full contradicts --fix recompute=none"),
    (("--sp", "--fix", "sp=off"), "--sp contradicts --fix sp=off"),
    (("--no-sp", "--fix", "sp=on"), "--no-sp contradicts --fix sp=on"),
    (("--allow", "cp=3"), "--allow cp=3 does not divide --gpus 16"),
    (("--allow", "ep=2"), "--allow ep=2: llama-3-8b has no experts"),
    (("--tp", "3"), "--tp 3 does not divide --gpus 16"),
    # a held micro-batch alone: 512 sequences over micro-batches of 3 (no dp was held)
    (("--allow", "micro_batch=3"), "not divisible by micro_batch 3 (--allow micro_batch=3)"),
])
def test_refusals_name_the_options_as_the_user_gave_them(cli, args, needle):
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "16", *args), needle)
