"""Time, GPU-hours, energy and cost to train (llmpar.cost.training; docs/sweep.md), by hand.

Worked example used throughout: 15T tokens at 1.0e6 tokens/s on 1,024 H100 (DGX H100 profile).
  time      15e12 / 1e6 = 1.5e7 s = 1.5e7 / 86,400 = 173.61 days
  GPU-hours 1,024 x 1.5e7 / 3,600 = 4,266,666.7
  power     DGX H100 user guide: 10.2 kW max for 8 GPUs -> 1,275 W per GPU (700 W H100 SXM TDP + 575 W node share)
  energy    4,266,666.7 GPU-h x 1,275 W x PUE 1.2 / 1e6 = 6,528 MWh
  cost      4,266,666.7 x 2.5 per GPU-hour = 10,666,666.7
"""

from __future__ import annotations

import numpy as np
import pytest

from llmpar.cost import training as T
from llmpar.errors import UserError
from llmpar.specs import registry
from llmpar.specs.hardware import Hardware
from llmpar.specs.registry import load_hardware
from llmpar.units import parse_power

from conftest import assert_one_line_error

H100 = registry.load_hardware("h100-sxm")


def test_days_gpu_hours_energy_cost_by_hand():
    assert T.train_time_s(15e12, 1e6) == pytest.approx(1.5e7)
    assert T.train_days(15e12, 1e6) == pytest.approx(173.6111, rel=1e-6)
    hours = T.gpu_hours(1024, 1.5e7)
    assert hours == pytest.approx(4_266_666.667, rel=1e-9)
    assert T.power_per_gpu_w(700.0, 10_200.0, 8) == pytest.approx(1275.0)
    assert T.node_share_per_gpu_w(700.0, 10_200.0, 8) == pytest.approx(575.0)
    assert T.power_per_gpu_w(700.0) == 700.0          # no node power: the board alone
    assert T.energy_mwh(hours, 1275.0, 1.2) == pytest.approx(6528.0, rel=1e-9)
    assert T.energy_mwh(hours, 1275.0) == pytest.approx(5440.0, rel=1e-9)   # PUE 1: IT energy
    assert T.training_cost(hours, 2.5) == pytest.approx(10_666_666.67, rel=1e-9)
    # 4,194,304 tokens per step: ceil(15e12 / 4,194,304) = 3,576,279 steps (last one partial)
    assert T.train_steps(15e12, 4_194_304) == 3_576_279


def test_scaling_efficiency_definition():
    # tokens/s per GPU relative to the reference count's: doubling GPUs and tokens/s is 1.0
    assert T.scaling_efficiency(2e6, 2048, 1e6, 1024) == pytest.approx(1.0)
    assert T.scaling_efficiency(1.5e6, 2048, 1e6, 1024) == pytest.approx(0.75)
    assert T.scaling_efficiency(1e6, 1024, 1e6, 1024) == 1.0


def test_formulas_are_array_polymorphic():
    tps = np.array([1e6, 2e6, 3e6])
    gpus = np.array([1024, 2048, 4096])
    days = T.train_days(15e12, tps)
    hours = T.gpu_hours(gpus, T.train_time_s(15e12, tps))
    energy = T.energy_mwh(hours, 1275.0, 1.2)
    eff = T.scaling_efficiency(tps, gpus, tps[0], gpus[0])
    for i in range(3):
        assert days[i] == T.train_days(15e12, float(tps[i]))
        assert energy[i] == pytest.approx(T.energy_mwh(T.gpu_hours(int(gpus[i]), 15e12 / tps[i]), 1275.0, 1.2))
    assert eff.tolist() == pytest.approx([1.0, 1.0, 0.75])
    out = T.estimate(H100, tokens=15e12, tokens_per_s=tps, gpus=gpus, tokens_per_step=4_194_304)
    assert out["energy_mwh"].shape == (3,) and out["days"].tolist() == days.tolist()
    assert out["steps"] == 3_576_279              # tokens and tokens per step are scalars here


def test_estimate_on_the_h100_profile():
    t = T.estimate(H100, tokens=15e12, tokens_per_s=1e6, gpus=1024, tokens_per_step=4_194_304, pue=1.2,
                   gpu_hour_price=2.5)
    assert t["days"] == pytest.approx(173.6111, rel=1e-6)
    assert t["gpu_hours"] == pytest.approx(4_266_666.667, rel=1e-9)
    assert t["power_per_gpu_w"] == 1275.0 and t["power_basis"] == "max_node"
    assert t["board_power_w"] == 700.0 and t["node_power_w"] == 10_200.0
    assert t["energy_mwh"] == pytest.approx(6528.0)
    assert t["cost"] == pytest.approx(10_666_666.67) and t["price_source"] == "--gpu-hour-price"
    assert t["steps"] == 3_576_279
    assert any("upper bound" in a for a in t["assumptions"])
    # no price, PUE unstated: cost None, PUE 1 (IT only) said in words
    t = T.estimate(H100, tokens=15e12, tokens_per_s=1e6, gpus=1024)
    assert t["cost"] is None and t["pue"] == 1.0 and t["energy_mwh"] == pytest.approx(5440.0)
    assert any("IT equipment only" in a for a in t["assumptions"])
    assert any("no price" in a for a in t["assumptions"])


def test_estimate_power_sources_and_profile_price():
    # a measured average replaces the maximum: 900 W x 4,266,666.7 GPU-h = 3,840 MWh
    t = T.estimate(H100, tokens=15e12, tokens_per_s=1e6, gpus=1024, power_per_gpu_w=900.0)
    assert t["power_basis"] == "given" and t["energy_mwh"] == pytest.approx(3840.0)
    # a profile without node_power: the board only (700 W), said in words
    board_only = H100.model_copy(update={"node_power": None})
    t = T.estimate(board_only, tokens=15e12, tokens_per_s=1e6, gpus=1024)
    assert t["power_basis"] == "max_board" and t["energy_mwh"] == pytest.approx(4_266_666.667 * 700 / 1e6)
    assert any("board power only" in a for a in t["assumptions"])
    # neither: energy unknown, not zero
    bare = board_only.model_copy(update={"gpu": H100.gpu.model_copy(update={"board_power": None})})
    t = T.estimate(bare, tokens=15e12, tokens_per_s=1e6, gpus=1024)
    assert t["energy_mwh"] is None and t["power_per_gpu_w"] is None
    # a user's profile price counts unless --gpu-hour-price is given
    priced = H100.model_copy(update={"gpu_hour_price": 3.0})
    t = T.estimate(priced, tokens=15e12, tokens_per_s=1e6, gpus=1024)
    # 15e12 tokens / 1e6 tokens/s = 1.5e7 s = 4,166.7 h x 1024 GPUs = 4,266,666.7 GPU-hours;
    # x $3.0 = $12,800,000 and x $2.0 = $8,533,333.33
    assert t["cost"] == pytest.approx(12_800_000.0) and "profile" in t["price_source"]
    t = T.estimate(priced, tokens=15e12, tokens_per_s=1e6, gpus=1024, gpu_hour_price=2.0)
    assert t["cost"] == pytest.approx(8_533_333.33) and t["price_source"] == "--gpu-hour-price"


def test_parse_inputs():
    assert T.parse_inputs("15T")["tokens"] == 15e12
    assert T.parse_inputs("300B")["tokens"] == 300e9
    assert T.parse_inputs("2.5e12")["tokens"] == 2.5e12
    assert T.parse_inputs(2.5e12, pue=1.2, gpu_hour_price=2.5, power_per_gpu="900 W") == {
        "tokens": 2.5e12, "pue": 1.2, "gpu_hour_price": 2.5, "power_per_gpu_w": 900.0, "failure_rate": None,
        "restart_s": None, "checkpoint_bandwidth": None, "checkpoint": None}
    g = T.parse_inputs("1T", failure_rate=2e-5, restart_time="5min", checkpoint_bandwidth="25 GB/s", checkpoint="async")
    assert (g["failure_rate"], g["restart_s"], g["checkpoint_bandwidth"], g["checkpoint"]) == (2e-5, 300.0, 25e9, "async")
    for bad in (dict(tokens="1T", failure_rate=0), dict(tokens="1T", failure_rate="often"), dict(tokens="1T", failure_rate=5),
                dict(tokens="1T", restart_time="soon"), dict(tokens="1T", restart_time="30d"),
                dict(tokens="1T", checkpoint_bandwidth="25"), dict(tokens="1T", checkpoint="lazy"), dict(failure_rate=1e-5)):
        with pytest.raises(UserError):
            T.parse_inputs(**bad)
    for bad in (dict(tokens="lots"), dict(tokens="15T", pue=0.9), dict(tokens="15T", gpu_hour_price=0),
                dict(tokens="15T", power_per_gpu="900 V"), dict(pue=1.2), dict(gpu_hour_price=2.5)):
        with pytest.raises(UserError):
            T.parse_inputs(**bad)


def test_parse_power():
    assert parse_power("700 W") == 700.0
    assert parse_power("10.2 kW") == 10_200.0
    assert parse_power("1000W") == 1000.0 and parse_power(400) == 400.0
    with pytest.raises(UserError):
        parse_power("700 V")
    with pytest.raises(UserError):
        parse_power("-5 W")


# DGX datasheets / user guides (maximum system power) and GPU TDPs (hardware/*.yaml comments)
SHIPPED_POWER = {
    "a100-80gb": (400, 6_500), "h100-sxm": (700, 10_200), "h100-sxm-roce": (700, 10_200), "h200": (700, 10_200),
    "h800": (700, 10_200), "b200": (1000, 14_300), "gb200-nvl72": (1200, 6_670),
}


@pytest.mark.parametrize("name", sorted(SHIPPED_POWER))
def test_shipped_profiles_state_power(name):
    hw = registry.load_hardware(name)
    board, node = SHIPPED_POWER[name]
    assert hw.gpu.board_power == board and hw.node_power == node
    assert hw.gpu_hour_price is None             # no price ships as fact
    assert T.node_share_per_gpu_w(board, node, hw.gpus_per_node) > 0


def test_node_power_must_include_the_gpus():
    data = H100.model_dump()
    data["node_power"] = 5000.0                  # < 8 x 700 W
    with pytest.raises(ValueError, match="node_power"):
        Hardware.model_validate(data)
    data["node_power"] = "10.2 kW"
    assert Hardware.model_validate(data).node_power == 10_200.0


# ------------------------------------------------------------------ plan and step --tokens

def test_plan_api_training_for_plan_one():
    from llmpar.planner.search import plan

    r = plan("llama-3-8b", gpus=8, top=1, tokens="15T", pue=1.2, gpu_hour_price=2.5)
    best = r.best
    t = r.training
    assert t["days"] == pytest.approx(15e12 / best.tokens_per_s / 86_400)
    assert t["gpu_hours"] == pytest.approx(8 * 15e12 / best.tokens_per_s / 3_600)
    assert t["energy_mwh"] == pytest.approx(t["gpu_hours"] * 1275 * 1.2 / 1e6)
    assert t["cost"] == pytest.approx(t["gpu_hours"] * 2.5)
    assert r.to_dict()["training"]["days"] == t["days"]
    assert "training" not in plan("llama-3-8b", gpus=8, top=1).to_dict()


def test_step_cli_tokens(cli):
    args = ("step", "llama-3-8b", "--gpus", "8", "--global-batch", "64", "--zero", "1")
    res = cli(*args, "--tokens", "300B", "--pue", "1.1", "--gpu-hour-price", "2", "--json")
    assert res.code == 0, res.err
    d = res.json()
    t = d["training"]
    assert set(t) >= {"days", "gpu_hours", "energy_mwh", "cost", "tokens", "pue", "power_per_gpu_w", "steps"}
    assert t["days"] == pytest.approx(300e9 / d["tokens_per_s"] / 86_400)
    assert t["energy_mwh"] == pytest.approx(t["gpu_hours"] * 1275 * 1.1 / 1e6)
    assert t["cost"] == pytest.approx(2 * t["gpu_hours"])
    assert "training" not in cli(*args, "--json").json()
    text = cli(*args, "--tokens", "300B")
    assert text.code == 0 and "to train 300B tokens" in text.out and "GPU-hours" in text.out
    assert_one_line_error(cli(*args, "--pue", "1.2"), "--tokens")
    assert_one_line_error(cli(*args, "--tokens", "15T", "--pue", "0.5"), "--pue")
    assert_one_line_error(cli(*args, "--tokens", "many"), "--tokens")


def test_plan_cli_tokens(cli):
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--top", "1", "--tokens", "15T", "--gpu-hour-price", "2.5")
    assert res.code == 0, res.err
    assert "#1 to train 15T tokens" in res.out and "cost" in res.out


def test_goodput_by_hand():
    """cost/goodput.py on numbers a reader can redo.

    Llama 3: lambda = 419 / (16,384 x 54 x 24 h) = 1.9734e-5 per GPU-hour; on 16,384 GPUs the job
    fails every 3,600 / (1.9734e-5 x 16,384) = 11,135 s = 3.093 h.
    Llama 3.1 405B checkpoint: 405,853,388,800 parameters x (2 + 12) B = 5.682 TB; 2,048 nodes x
    400 GB/s = 819 TB/s, capped at Tectonic's 2 TB/s: W = 2.841 s.
    Young/Daly: tau = sqrt(2 x 2.841 x 11,135) - 2.841 = 251.5 - 2.84 = 248.7 s.
    Goodput = 248.7 / 251.5 x (1 - (251.5 / 2 + 600) / 11,135) = 0.98870 x 0.93482 = 0.9243."""
    from llmpar.cost import goodput as G

    assert G.LLAMA3_FAILURES_PER_GPU_HOUR == pytest.approx(1.9734e-5, rel=1e-4)
    M = G.job_mtbf_s(16384, G.LLAMA3_FAILURES_PER_GPU_HOUR)
    assert M == pytest.approx(11135.0, rel=1e-3)
    S = 405_853_388_800 * 14
    W = G.checkpoint_write_s(S, 2048, 400e9, G.TECTONIC_BYTES_PER_S)
    assert W == pytest.approx(2.841, rel=1e-3)
    tau = G.young_daly_interval_s(W, M)
    assert tau == pytest.approx(248.7, rel=1e-3)
    g = G.goodput(tau, W, 600.0, M)
    assert g == pytest.approx(0.9243, rel=1e-3)
    # asynchronous saves stall only for the host copy: 5.682 TB / 16,384 GPUs = 346.8 MB at 64 GB/s =
    # 5.42 ms, and cannot checkpoint more often than the 2.84 s write: tau = max(sqrt(2 x 0.00542 x
    # 11,135) - 0.00542, 2.84) = 10.98 s; goodput = 10.98 / 10.99 x (1 - (10.99 / 2 + 600) / 11,135)
    # = 0.99951 x 0.94562 = 0.9452: the restart, not the checkpoint, is what async saves leave
    e = G.estimate(gpus=16384, gpus_per_node=8, checkpoint_bytes=S, per_node_bytes_per_s=400e9,
                   host_bytes_per_s_per_gpu=64e9, mode="async")
    assert e["checkpoint_stall_s"] == pytest.approx(S / 16384 / 64e9, rel=1e-9)
    assert e["checkpoint_interval_s"] == pytest.approx(10.98, rel=2e-3)
    assert e["goodput"] == pytest.approx(10.98 / (10.98 + 0.00542) * (1 - (10.99 / 2 + 600) / 11135), rel=2e-3)
    # a job that fails faster than it restarts trains nothing
    assert G.goodput(100.0, 10.0, 600.0, 300.0) == 0.0


def test_plan_reports_effective_days(cli):
    r = cli("plan", "llama-3-70b", "--gpus", "64", "--tokens", "1T", "--json")
    assert r.code == 0, r.err
    t = r.json()["training"]
    g = t["goodput"]
    assert 0 < g["goodput"] <= 1
    assert g["effective_days"] == pytest.approx(t["days"] / g["goodput"], rel=1e-9)


def test_prices_per_profile_and_per_million_tokens():
    """h100-sxm=2.5,b200=4.5 (aliases resolve: h100 is h100-sxm); 15e12 tokens at 1e6 tokens/s on
    1,024 GPUs = 4,266,667 GPU-hours x 2.5 = 10,666,667, i.e. 10,666,667 / 15e6 = 0.711 per million
    training tokens."""
    prices = T.parse_prices("h100=2.5,b200=4.5")
    assert prices == {"h100-sxm": 2.5, "b200": 4.5}
    t = T.estimate(load_hardware("h100-sxm"), tokens=15e12, tokens_per_s=1e6, gpus=1024, gpu_hour_price=prices)
    assert t["cost"] == pytest.approx(10_666_666.67) and t["gpu_hour_price"] == 2.5
    assert t["cost_per_million_tokens"] == pytest.approx(10_666_666.67 / 15e6)
    none = T.estimate(load_hardware("a100-80gb"), tokens=15e12, tokens_per_s=1e6, gpus=1024, gpu_hour_price=prices)
    assert none["cost"] is None and any("names no price for a100-80gb" in n for n in none["assumptions"])
    for bad in ("h100=2.5,h100-sxm=3", "nope=2", "h100=-1", "h100:2", "cheap"):
        with pytest.raises(UserError):
            T.parse_prices(bad)


def test_deadline_units():
    assert T.parse_deadline("90d") == 90 and T.parse_deadline("12w") == 84 and T.parse_deadline("48h") == 2
    for bad in ("90", "soon", "-3d", "0d"):
        with pytest.raises(UserError):
            T.parse_deadline(bad)


def test_sweep_deadline_picks_the_smallest_count_that_makes_it():
    import llmpar

    s = llmpar.sweep("llama-3-8b", gpus=[8, 16, 32, 64], tokens="1T", deadline="30d")
    rows = {r.gpus: r for r in s.rows}
    d = s.deadline["by_hardware"]["h100-sxm"]
    # the first count (in order) whose effective days are within 30; every smaller count misses
    assert d["effective_days"] <= 30
    assert all(rows[n].training["goodput"]["effective_days"] > 30 for n in rows if n < d["gpus"])
    assert d["effective_days"] == pytest.approx(rows[d["gpus"]].training["goodput"]["effective_days"])


def test_a_failure_rate_too_small_to_mean_anything_is_refused(cli):
    """λ = 1e-308 per GPU-hour made the job's time between failures 3,600 / (λ·16) overflow to inf
    and the goodput τ/(τ+δ) read inf/inf = nan (reliability re-check 2026-12-03); below 1e-12 (a
    million GPUs for a century: 8.8e11 GPU-hours, under one failure) it is refused, at 1e-12 finite."""
    from conftest import assert_one_line_error

    assert_one_line_error(cli("step", "llama-3-8b", "--gpus", "16", "--tokens", "1T", "--failure-rate", "1e-308"),
                          "--failure-rate", "1e-12")
    ok = cli("step", "llama-3-8b", "--gpus", "16", "--tokens", "1T", "--failure-rate", "1e-12")
    assert ok.code == 0, ok.err
    assert "nan" not in ok.out and "goodput 100.0 %" in ok.out


def test_large_quantities_print_with_a_suffix_never_an_exponent_before_it():
    """`--tokens 10000T` printed "1e+04T tokens" and a cost of "1.28e+04T" (reliability review, item
    33, re-checked 2026-12-03): quantities are rounded to their significant figures first and take
    the rounded value's suffix, P (10^15) included; beyond 10^18 plain e-notation."""
    from llmpar.cli.training import fmt_quantity, fmt_tokens

    assert fmt_tokens(1e16) == "10P"                  # 10,000T = 10^16
    assert fmt_quantity(1.28e16) == "12.8P"
    assert fmt_quantity(999_700) == "1M"              # 3 significant figures: 1.00e6, not "1e+03k"
    assert fmt_tokens(15e12) == "15T" and fmt_tokens(12.8e9) == "12.8B"
    assert fmt_quantity(2e18) == "2e+18"
