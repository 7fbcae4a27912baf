"""API result objects (issue 24, API; newcomer review): each plan row carries its own training
figures, categorical knobs read as the JSON's strings, and a plan's layout feeds `step()`."""

import pytest

import llmpar
from llmpar.parallel import Parallel, RECOMPUTE, SCHEDULES


def test_plan_rows_carry_training_figures():
    """days = tokens / tokens_per_s / 86,400 (cost/training.train_days, before failures); each row's
    from its own tokens/s, #1's is PlanResult.training."""
    r = llmpar.plan("llama-3-8b", gpus=8, tokens="1T", top=3)
    assert len({row.tokens_per_s for row in r.plans}) > 1       # the rows differ, so must their days
    for row in r.plans:
        assert row.training["days"] == pytest.approx(1e12 / row.tokens_per_s / 86_400, rel=1e-12)
        assert row.training["interval"]["days"][0] <= row.training["days"] <= row.training["interval"]["days"][1]
        assert row.to_dict()["training"]["days"] == row.training["days"]
    assert r.training["days"] == r.plans[0].training["days"]
    assert llmpar.plan("llama-3-8b", gpus=8, top=1).plans[0].training is None


def test_categorical_knobs_read_as_json_strings():
    p = Parallel(recompute=2, schedule=2)
    assert p.recompute == "full" and p.recompute == 2 and str(p.recompute) == "full"
    assert p.schedule == "interleaved" and RECOMPUTE[p.recompute] == "full" and SCHEDULES[p.schedule] == "interleaved"
    assert p.recompute != "none" and p.recompute != 1
    s = llmpar.step("llama-3-8b", gpus=8, recompute="selective")
    assert s.parallel.recompute == "selective"
    assert s.to_dict()["parallel"]["recompute"] == "selective"


def test_plan_layout_round_trips_into_step():
    best = llmpar.plan("llama-3-8b", gpus=8, top=1).best
    d = best.parallel.as_dict()
    again = llmpar.step("llama-3-8b", gpus=8, **{k: v for k, v in d.items()})
    assert again.step_time_s == pytest.approx(best.step_time_s, rel=1e-12)
    assert again.parallel.recompute == best.parallel.recompute
