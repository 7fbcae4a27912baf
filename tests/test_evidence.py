"""Intervals and evidence classes (llmpar.evidence; docs/validation.md, Intervals), the
leave-one-source-out record, and the planner's recommending order (docs/planner.md).

Every number below is derived by hand beside its assertion."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from llmpar import evidence as EV
from llmpar.errors import UserError
from llmpar.planner.ranking import RANK_TOLERANCE, robust_order

KEY = ("megatron-core", "hopper", "dense", "16-bit", "65-512 GPUs", "seq 4K-16K")
# ten residuals of one source, ln(measured / predicted), equally spaced by 0.05 from -0.10
TEN = [-0.10 + 0.05 * i for i in range(10)]


# TEN's 10 % / 50 % / 90 % quantiles (midpoints (i + 0.5) / 10): -0.075, 0.125, 0.325. One source,
# so the few-sources factor is sqrt(1 + 1/1) = sqrt 2 about the median: 0.125 -/+ sqrt 2 x 0.2
LO1, HI1 = 0.125 - math.sqrt(2) * 0.2, 0.125 + math.sqrt(2) * 0.2     # -0.15784, 0.40784
M = 1.025                                                               # e^MARGIN_PER_DIMENSION


def residuals(values, key=KEY, source="a", kind="speed"):
    return [EV.Residual(source, kind, key, v) for v in values]


def test_weighted_quantile_by_hand():
    # equal weights on 1, 2, 3, 4: cumulative midpoints 0.125, 0.375, 0.625, 0.875; the median
    # lies halfway between 2 (0.375) and 3 (0.625): 2.5; below the first midpoint it clamps to 1
    assert EV.weighted_quantile([4, 1, 3, 2], [1, 1, 1, 1], 0.5) == pytest.approx(2.5)
    assert EV.weighted_quantile([1, 2, 3, 4], [1, 1, 1, 1], 0.1) == pytest.approx(1.0)
    # weights 3 and 1 on 0 and 10: midpoints 1.5/4 = 0.375 and 3.5/4 = 0.875; at 0.5:
    # 0 + (0.5 - 0.375) / 0.5 x 10 = 2.5
    assert EV.weighted_quantile([0, 10], [3, 1], 0.5) == pytest.approx(2.5)


def test_source_weights_make_each_source_weigh_one():
    w = EV.source_weights(["a", "a", "a", "b"])
    assert list(w) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])


def test_interval_from_a_known_residual_set():
    # midpoints (i + 0.5) / 10 = 0.05 ... 0.95; the 10 % quantile lies halfway between the first
    # two values: -0.10 + 0.025 = -0.075; the 90 % one between the last two: 0.30 + 0.025 = 0.325;
    # the median between 0.10 and 0.15: 0.125. One source: spread about the median x sqrt 2
    iv = EV.interval(residuals(TEN), "speed", KEY, 0.8)
    assert (iv.lo, iv.hi) == pytest.approx((math.exp(LO1), math.exp(HI1)))   # 0.8540, 1.5036
    assert (iv.rows, iv.sources, iv.extrapolated) == (10, 1, False)
    assert iv.evidence()["class"] == " · ".join(KEY)


def test_a_class_with_no_rows_widens_by_the_rule():
    # the query's sequence band has no residual: one dimension dropped, both ends widened by
    # ln 1.025: ratio bounds 0.8540 / 1.025 = 0.8332 and 1.5036 x 1.025 = 1.5412, and it says so
    query = KEY[:-1] + ("seq >16K",)
    iv = EV.interval(residuals(TEN), "speed", query, 0.8)
    assert (iv.lo, iv.hi) == pytest.approx((math.exp(LO1) / M, math.exp(HI1) * M))
    assert iv.extrapolated and iv.used == KEY[:-1] and iv.rows == 10
    # a stack with no published run at all: every dimension but none dropped -> 6 x ln 1.025
    other = ("torchtitan", "blackwell", "moe", "fp8", ">4096 GPUs", "seq >16K")
    iv = EV.interval(residuals(TEN), "speed", other, 0.8)
    assert iv.used == () and (iv.lo, iv.hi) == pytest.approx((math.exp(LO1) / M ** 6, math.exp(HI1) * M ** 6))


def test_no_residual_at_all_is_the_stated_band():
    iv = EV.interval([], "speed", KEY, 0.8)
    assert (iv.lo, iv.hi, iv.rows) == (0.5, 2.0, 0) and iv.extrapolated


def test_the_point_prediction_is_always_inside():
    # residuals 0.10 ... 0.55: every run slower than predicted; quantiles 0.125 / 0.325 / 0.525,
    # spread x sqrt 2 about the median: 0.325 - 0.2828 = 0.042 > 0 is moved to 0 so the interval
    # starts at the prediction itself; the top 0.325 + 0.2828 = 0.6078
    iv = EV.interval(residuals([0.10 + 0.05 * i for i in range(10)]), "speed", KEY, 0.8)
    assert iv.lo == pytest.approx(1.0) and iv.hi == pytest.approx(math.exp(0.325 + math.sqrt(2) * 0.2))


def test_a_thin_class_falls_back_and_exclusion_leaves_a_source_out():
    # 4 rows of the exact class (< MIN_ROWS = 8) and 10 of its parent: the parent's 14 rows are used
    # (each source weighing the same); leaving source "b" out leaves the 10 of "a" only
    thin = residuals([0.5] * 4, source="b")
    parent = residuals(TEN, key=KEY[:-1] + ("seq <=4K",))
    iv = EV.interval(thin + parent, "speed", KEY, 0.8)
    assert iv.used == KEY[:-1] and iv.rows == 14 and iv.sources == 2
    iv = EV.interval(thin + parent, "speed", KEY, 0.8, exclude_source="b")
    assert iv.rows == 10 and (iv.lo, iv.hi) == pytest.approx((math.exp(LO1) / M, math.exp(HI1) * M))


def test_few_sources_factor_widens_a_thin_pool_about_its_median():
    """A new cluster is a new source: sqrt(1 + 1/k) for a pool of k sources (1: 1.4142, 4: 1.1180,
    20: 1.0247). Two sources a and b of five residuals each, a at 0.0 and b at 0.2: weights 1/5 each,
    cumulative midpoints 0.05 ... 0.95; the 10 % quantile is a's 0.0, the 90 % one b's 0.2, the median
    halfway, 0.1; k = 2 spreads them to 0.1 -/+ sqrt 1.5 x 0.1 = -0.0225 and 0.2225."""
    assert [round(EV.few_sources_factor(k), 4) for k in (1, 4, 20)] == [1.4142, 1.118, 1.0247]
    rs = residuals([0.0] * 5, source="a") + residuals([0.2] * 5, source="b")
    iv = EV.interval(rs, "speed", KEY, 0.8)
    f = math.sqrt(1.5)
    assert iv.sources == 2 and (iv.lo, iv.hi) == pytest.approx((math.exp(0.1 - f * 0.1), math.exp(0.1 + f * 0.1)))


def test_speed_json_scales_every_figure_by_the_ratio():
    # ratio bounds 0.9 .. 1.2 on a 10 s step: 9 .. 12 s; tokens/s 1000 -> 1000/1.2 .. 1000/0.9;
    # 10 days and 100 GPU-hours scale as the time
    iv = EV.Interval(0.8, 0.9, 1.2, KEY, KEY, 10, 2)
    out = EV.speed_json(iv, 10.0, 1000.0, 0.5, {"days": 10.0, "gpu_hours": 100.0, "cost": None})
    assert out["step_time_s"] == pytest.approx([9.0, 12.0])
    assert out["tokens_per_s"] == pytest.approx([1000 / 1.2, 1000 / 0.9])
    assert out["mfu"] == pytest.approx([0.5 / 1.2, 0.5 / 0.9])
    assert out["days"] == pytest.approx([9.0, 12.0]) and out["gpu_hours"] == pytest.approx([90.0, 120.0])
    assert "cost" not in out and out["evidence"]["rows"] == 10


def test_plausibility_against_the_best_published_run_of_the_class():
    # the best of the class measured 0.40; an interval whose top is x1.2 flags a prediction above
    # 0.40 x 1.2 = 0.48 (even its low end, 0.5 / 1.2 = 0.417, beats every published run)
    rs = [EV.Residual("a", "speed", KEY, 0.0, m, 4096.0) for m in (0.30, 0.40)]
    iv = EV.Interval(0.8, 0.9, 1.2, KEY, KEY, 10, 2)
    p = EV.plausibility(np.array([0.47, 0.50]), iv, "hopper", False, "bf16", rs)
    assert p["best_published_mfu"] == 0.40 and list(p["above_published"]) == [False, True]
    assert p["class"] == "hopper · dense · 16-bit"
    # with a GPU count, the scale band joins the class: 100 GPUs is KEY's band (65-512), 8 is not,
    # so that query falls back to the band-less class
    assert EV.plausibility(0.5, iv, "hopper", False, "bf16", rs, gpus=100)["class"] == "hopper · dense · 16-bit · 65-512 GPUs"
    assert EV.plausibility(0.5, iv, "hopper", False, "bf16", rs, gpus=8)["class"] == "hopper · dense · 16-bit"
    assert EV.plausibility(0.9, iv, "blackwell", False, "bf16", rs) is None   # no run of that generation
    assert EV.min_published_tokens_per_gpu(rs) == 4096.0


def test_plausibility_uses_the_compared_class_s_own_interval_not_a_widened_one():
    """With MIN_ROWS (8) or more runs in the comparison class, the yardstick is that class's own
    80 % interval: here every one of the 8 runs was measured 10 % slower than predicted (residual
    ln 1.1), so every quantile is ln 1.1 and the upper factor is exactly 1.1. The best run measured
    0.40, so a prediction is flagged above 0.40 x 1.1 = 0.44: 0.45 is (0.45 / 1.1 = 0.409 > 0.40),
    0.43 is not (0.391). The query's interval, widened to x2 as an extrapolated one is, would have
    flagged nothing below 0.80: it is not used (GPT-3 175B on 1,024 A100s under megatron-core, x1.54,
    was not flagged at 62 % against a class record of 47.6 %)."""
    rs = [EV.Residual(f"s{i % 2}", "speed", KEY, math.log(1.1), m, 4096.0)
          for i, m in enumerate((0.30, 0.31, 0.32, 0.33, 0.34, 0.35, 0.36, 0.40))]
    wide = EV.Interval(0.8, 0.5, 2.0, KEY, (), 8, 2)
    p = EV.plausibility(np.array([0.43, 0.45, 0.79]), wide, "hopper", False, "bf16", rs)
    assert p["class_factor"] == pytest.approx(1.1) and p["rows"] == 8
    assert list(p["above_published"]) == [False, True, True]
    # below MIN_ROWS the query's interval stands in (7 runs: x2, nothing up to 0.80 flagged)
    p7 = EV.plausibility(np.array([0.45, 0.79]), wide, "hopper", False, "bf16", rs[1:])
    assert p7["class_factor"] == 2.0 and list(p7["above_published"]) == [False, False]


@pytest.mark.parametrize("text, value", [(None, 0.8), ("80%", 0.8), ("0.9", 0.9), (95, 0.95), ("50 %", 0.5)])
def test_interval_level_parsing(text, value):
    assert EV.level_value(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["1.5", "0", "abc", "100%", "nan"])
def test_bad_interval_level_is_one_line(text):
    with pytest.raises(UserError, match="interval-level"):
        EV.level_value(text)


def test_evidence_class_bands():
    # 8 GPUs is the first band's top, 9 the next; 4096 tokens <= 4K, 8192 in 4K-16K, 131072 > 16K
    assert EV.evidence_class("s", "hopper", True, "fp8", 8, 4096)[2:] == ("moe", "fp8", "1-8 GPUs", "seq <=4K")
    assert EV.evidence_class("s", None, False, "fp16", 16384, 131072)[1:] == (
        "unknown generation", "dense", "16-bit", ">4096 GPUs", "seq >16K")


# ------------------------------------------------------------------------ the planner's order

def test_a_tight_layout_is_not_first_by_default():
    # candidate 0 is the fastest but TIGHT; candidate 1 is 1 % slower and fits with margin;
    # candidate 2 is 20 % slower: the order is 1, 2, then 0
    t = np.array([1.00, 1.01, 1.20])
    par = SimpleNamespace(tp=np.array([8, 8, 8]), pp=np.array([2, 2, 2]), cp=np.ones(3, int), ep=np.ones(3, int),
                          offload_layers=np.zeros(3, int))
    order, band = robust_order(np.array([0, 1, 2]), t, np.array([70.0, 60.0, 50.0]), par,
                               np.array([True, False, False]))
    assert list(order) == [1, 2, 0] and band == 1


def test_near_ties_go_to_the_simpler_layout():
    # within 2 % of 1.00 s: candidate 0 (cp 2, 1.00 s) and 1 (cp 1, 1.015 s); candidate 2 (tp 1,
    # no CP, 1.03 s) is outside the band and stays behind them: 1, 0, 2
    t = np.array([1.00, 1.015, 1.03])
    par = SimpleNamespace(tp=np.array([8, 8, 1]), pp=np.array([1, 1, 1]), cp=np.array([2, 1, 1]),
                          ep=np.ones(3, int), offload_layers=np.zeros(3, int))
    order, band = robust_order(np.array([0, 1, 2]), t, np.array([1.0, 2.0, 3.0]), par, np.zeros(3, bool))
    assert RANK_TOLERANCE == 0.02 and band == 2 and list(order) == [1, 0, 2]


def test_plan_default_does_not_recommend_tight_but_margin_0_ranks_by_time():
    # issue 23: plan llama-3.1-405b --gpus 2048 used to put a TIGHT layout (82.6 of 85.9 GB) first
    from llmpar.api import plan

    pure = plan("llama-3.1-405b", gpus=2048, top=1, margin=0).best
    rec = plan("llama-3.1-405b", gpus=2048, top=1).best
    assert rec.memory["verdict"] == "fits"
    assert rec.step_time_s >= pure.step_time_s
    assert rec.interval["evidence"]["class"].startswith("megatron-core · hopper · dense")


# ------------------------------------------------------------------------ the shipped records

def test_loso_record_covers_every_fitted_source_and_is_today_s():
    from llmpar.validation import fit_plans as FP

    rec = FP.load_record()
    assert rec is not None, "validation/loso-fits.json is missing: python scripts/fit_stacks.py --loso"
    assert sorted(rec["held_out"]) == FP.fitted_sources()
    assert rec["fingerprint"] == FP.fingerprint(), (
        "a stack or fitted source changed since validation/loso-fits.json was written: "
        "python scripts/fit_stacks.py --loso, then python scripts/write_residuals.py")
    for src, held in rec["held_out"].items():
        # every plan that used the source left its parameters in the record
        for name, plan in FP.PLANS.items():
            if src in plan["files"]:
                gen = FP.GENERATION[name] or "default"
                assert set(plan["parameters"]) <= set(held["values"][FP.plan_stack(name)][gen]), (src, name)
        assert held["scheme"] in ("source", "configurations")


def test_validate_meets_the_trust_targets_and_ships_today_s_residuals():
    """issue 23's targets over validation/, leave-one-source-out, each source weighing the same;
    and validation/residuals.json is what validate computes now."""
    from llmpar.validation import crossval
    from llmpar.validation.core import validate

    result = validate()
    cv = result.cross_validation
    assert cv["missing_sources"] == []
    assert cv["median_abs_error"] <= 0.10
    assert abs(cv["signed_median_error"]) <= 0.03
    assert 0.35 <= cv["optimistic_share"] <= 0.65
    assert 0.75 <= cv["interval_coverage"] <= 0.90
    shipped = json.loads((EV_dir() / EV.RESIDUALS_FILE).read_text())["residuals"]
    fresh = crossval.residual_records(result.rows)
    assert len(shipped) == len(fresh), "validation/residuals.json is stale: python scripts/write_residuals.py"
    for a, b in zip(shipped, fresh):
        assert (a["source"], a["row"], a["kind"], a["class"]) == (b["source"], b["row"], b["kind"], b["class"])
        assert a["residual"] == pytest.approx(b["residual"], abs=2e-6), (
            f"{a['source']} {a['row']}: validation/residuals.json is stale: python scripts/write_residuals.py")


def EV_dir():
    from llmpar.specs.registry import data_dir

    return data_dir("validation")


def test_the_step_at_the_class_record_is_the_same_flops_at_the_record_s_rate():
    # a 10 s step predicted at 60 % MFU does the work of 10 x 0.60 = 6 s at the peak; at the class's
    # best measured 40 % that work takes 6 / 0.40 = 15 s
    p = {"best_published_mfu": 0.40, "best_source": "s", "class": "c", "rows": 8, "class_factor": 1.1,
         "above_published": True}
    assert EV.with_step_at_best(p, 10.0, 0.60)["step_time_at_best_s"] == pytest.approx(15.0)
    assert EV.with_step_at_best(None, 10.0, 0.60) is None
    note = EV.implausible_note(0.60, p, step_time_s=10.0)
    assert note.endswith("at that run's 40.0 % the step would take 15 s")


def test_plausibility_never_compares_across_dtype_or_dense_and_moe():
    """An FP8 run's MFU is against the FP8 peak and an MoE run's is lowered by its routing: neither
    bounds a dense 16-bit prediction. With only FP8 and MoE runs of a generation published, a dense
    BF16 prediction has no class to be compared with (None), however high it is."""
    fp8 = ("x", "blackwell", "dense", "fp8", "65-512 GPUs", "seq <=4K")
    moe = ("x", "blackwell", "moe", "16-bit", "65-512 GPUs", "seq <=4K")
    rs = [EV.Residual("a", "speed", fp8, 0.0, 0.35, 4096.0), EV.Residual("b", "speed", moe, 0.0, 0.30, 4096.0)]
    iv = EV.Interval(0.8, 0.9, 1.1, KEY, KEY, 10, 2)
    assert EV.plausibility(0.9, iv, "blackwell", False, "bf16", rs, gpus=256) is None
    assert EV.plausibility(0.9, iv, "blackwell", False, "fp8", rs, gpus=256)["best_published_mfu"] == 0.35
