"""Each layout rule is written once (layout.py) and applied alike by `memory`, `step`, `plan` and
`calibrate runs` (issue 24 §1). For every rule of ``layout.LAYOUT_RULES`` and every settings rule
the planner counts (``plan.space.REASONS``), one layout that breaks it: `memory` and `step` refuse
it in the same words, and `plan` with that layout fixed finds no candidate and counts it under the
rule's own name (or, for the settings rules, refuses the setting the same way)."""

from __future__ import annotations

import pytest

import llmpar
from conftest import assert_one_line_error
from llmpar.errors import UserError
from llmpar.layout import LAYOUT_RULES
from llmpar.parallel import SCHEDULES
from llmpar.planner import knobs
from llmpar.planner import space as SP

# rule -> (model, layout keywords of memory/step, the words of the refusal). Shapes from
# models/*.yaml: llama-3-8b 32 layers, 32 heads, 8 KV heads, dense; mixtral-8x7b 32 layers, 8 experts
# of FFN 14336.
BREAKS = {
    "tp_heads": ("llama-3-8b", dict(gpus=16, tp=16), "tp=16 does not divide the 8 KV heads"),
    "pp_layers": ("llama-3-8b", dict(gpus=64, pp=64), "pp=64 exceeds the 32 layers"),
    "cp_seq": ("llama-3-8b", dict(gpus=3, cp=3, seq=8192), "cp=3 does not divide the sequence length 8192"),
    "ep": ("mixtral-8x7b", dict(gpus=3, tp=1, ep=3), "ep=3 does not divide the 8 experts of mixtral-8x7b"),
    "etp": ("mixtral-8x7b", dict(gpus=8, tp=1, ep=1, etp=3), "--etp 3 does not divide"),
    "sp_seq": ("llama-3-8b", dict(gpus=2, tp=2, sp=True, seq=8191), "seq/cp = 8191 divisible by tp=2"),
    "virtual_stages": ("llama-3-8b", dict(gpus=4, pp=4, virtual_stages=3), "virtual-stages 3"),
    # reliability review item 28: knobs that change nothing were printed as if they ran
    "sp_tp": ("llama-3-8b", dict(gpus=8, tp=1, sp=True), "--sp needs tp > 1"),
    "schedule_pp": ("llama-3-8b", dict(gpus=8, pp=1, schedule="zb-h1"), "--schedule zb-h1 needs pp > 1"),
}
# the rules the planner counts under "schedule" (its name for the pipeline-schedule rules)
_AS_SCHEDULE = {"virtual_stages", "schedule_pp"}


def test_every_layout_rule_has_a_case():
    assert set(BREAKS) | {"zero"} == set(LAYOUT_RULES)     # zero 0..3 is refused by the option itself
    assert set(LAYOUT_RULES) - _AS_SCHEDULE - {"zero"} <= set(SP.REASONS)


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_memory_and_step_refuse_in_the_same_words(rule):
    model, kw, words = BREAKS[rule]
    msgs = []
    for fn in (llmpar.memory, llmpar.step):
        with pytest.raises(UserError) as exc:
            fn(model, **kw)
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1]
    assert words in msgs[0]


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_the_planner_never_offers_it_and_counts_it_under_the_rule(rule):
    # the planner's candidates with every knob of the breaking layout fixed (plan --fix): none
    # survive, and the rejections are counted under the rule (virtual stages: under "schedule",
    # the planner's name for the interleaving rules, planner/space.py)
    from llmpar.inputs import make_settings
    from llmpar.specs import load_model

    name, kw, _ = BREAKS[rule]
    model = load_model(name)
    allowed = {k: (v if isinstance(v, bool) else SCHEDULES.index(v) if k == "schedule" else int(v),)
               for k, v in kw.items() if k in knobs.KNOBS}
    if "sp" in allowed:
        allowed["sp"] = (True,)
    spec = SP.SpaceSpec(gpus=kw["gpus"], seq=kw.get("seq", 8192), global_batch=64 * kw["gpus"], allowed=allowed)
    cand = SP.enumerate_space(model, spec, make_settings(model))
    assert cand.size == 0
    assert cand.rejected["schedule" if rule in _AS_SCHEDULE else rule] > 0


def test_the_settings_rules_are_the_same_in_memory_step_and_plan(cli):
    # ZeRO 0 under optimizer offload, ZeRO < 3 under parameter offload, TP under LoRA
    cases = [
        (["--optimizer-offload", "1", "--zero", "0"], "--optimizer-offload 1", "--zero 0"),
        (["--stack", "deepspeed", "--param-offload", "--zero", "1"], "--param-offload", "--zero 3"),
        (["--finetune", "lora", "--tp", "2", "--gpus", "2"], "--finetune lora", "tp 2"),
    ]
    for extra, *words in cases:
        for command in ("memory", "step"):
            assert_one_line_error(cli(command, "llama-3-8b", *extra), *words)
    # the planner applies the same masks to its candidates (space.rejected names them)
    r = llmpar.plan("llama-3-8b", gpus=8, optimizer_offload=1, top=1)
    assert r.space.rejected["optimizer_offload"] > 0 and all(p.parallel.zero >= 1 for p in r.plans)
    r = llmpar.plan("llama-3-8b", gpus=8, finetune="lora", top=1)
    assert r.space.rejected["finetune"] > 0 and all(p.parallel.tp == 1 for p in r.plans)


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_calibrate_runs_refuses_a_measured_run_of_it_in_the_same_words(rule, cli, tmp_path):
    # a runs table row with the breaking layout names its file and line, then the words memory and
    # step use (the rule's message from layout._violation_message)
    model, kw, words = BREAKS[rule]
    layout = {k: v for k, v in kw.items() if k != "seq"}
    cols = ["model", "hardware", "seq", "global_batch", "step_time_s", *layout]
    vals = [model, "h100-sxm", str(kw.get("seq", 8192)), str(64 * kw["gpus"]), "60.0",
            *(str(v).lower() for v in layout.values())]
    f = tmp_path / "runs.csv"
    f.write_text(",".join(cols) + "\n" + ",".join(vals) + "\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), "runs.csv:2", words)
