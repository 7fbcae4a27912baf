"""`serve --isl-range / --osl-range`: percentiles over a spread of request lengths
(cost/serving_tails.py; docs/serving.md, Length spread).

The expected values are those of the continuous uniforms, derived by hand below; the grid's error
bound is (HI - LO) / 256 of a length times its slope.
"""

from __future__ import annotations

import pytest

import llmpar
from llmpar.cost.serving_tails import length_percentiles
from tests.conftest import assert_one_line_error

# a state: TTFT 0.1 s, E2E 2.0 s, TPOT 10 ms; a prompt spends 2 prefill iterations of 20 ms at the
# mean prompt of 200 tokens: 2 x 0.02 / 200 = 0.2 ms per prompt token
STATE = {"ttft_s": 0.1, "e2e_s": 2.0, "tpot_s": 0.01, "prefill_iterations": 2.0, "prefill_iteration_s": 0.02}


def test_ttft_percentiles_are_the_prompt_uniforms_scaled():
    p = length_percentiles(STATE, (100, 300), (50, 150))
    slope = 2 * 0.02 / 200
    # TTFT_q = 0.1 + slope x (100 + 200 q - 200): p50 0.1, p90 0.116, p99 0.1196
    for q, want in (("p50", 0.1), ("p90", 0.116), ("p99", 0.1196)):
        assert p["ttft_s"][q] == pytest.approx(want, abs=slope * 200 / 256)
    assert p["tpot_s"]["p99"] == 0.01


def test_e2e_p99_is_the_trapezoid_of_two_uniforms():
    # E2E = 2.0 + U1 + U2 with U1 = 0.2 ms x (I - 200) on [-0.02, 0.02] and U2 = 10 ms x (O - 100) on
    # [-0.5, 0.5]: the sum is flat on [-0.48, 0.48] and ramps to 0 at +-0.52, so
    # P(S > s) = (0.52 - s)^2 / 0.08 there; = 0.01 at s = 0.52 - sqrt(0.0008) = 0.491716
    p = length_percentiles(STATE, (100, 300), (50, 150))
    assert p["e2e_s"]["p50"] == pytest.approx(2.0, abs=1e-9)
    assert p["e2e_s"]["p99"] == pytest.approx(2.491716, abs=0.003)
    # p90 lies on the flat part: 0.4 of U2's unit width above the mean = 2.4
    assert p["e2e_s"]["p90"] == pytest.approx(2.4, abs=0.003)


def test_serve_p50_is_the_mean_state_and_the_spread_widens_with_the_range():
    kw = dict(tp=4, rate=4, hardware="h100-sxm")
    base = llmpar.serve("llama-3.1-70b", isl=1024, osl=256, **kw)
    r = llmpar.serve("llama-3.1-70b", isl_range=(512, 1536), osl_range=(64, 448), **kw)
    assert r.ttft_s == pytest.approx(base.ttft_s, rel=1e-12)        # the state is the mean lengths'
    assert r.percentiles["ttft_s"]["p50"] == pytest.approx(r.ttft_s, rel=1e-9)
    assert r.percentiles["e2e_s"]["p50"] == pytest.approx(r.e2e_s, rel=1e-9)
    assert r.percentiles["ttft_s"]["p99"] > r.percentiles["ttft_s"]["p90"] > r.ttft_s
    # outputs of 64-448 at the state's TPOT: p99 - p50 is about 0.98 x 192 tokens x TPOT, plus the prompt's share
    spread = r.percentiles["e2e_s"]["p99"] - r.e2e_s
    assert spread == pytest.approx(0.98 * 192 * r.tpot_s, rel=0.05)
    assert r.settings["isl_range"] == [512, 1536]
    narrow = llmpar.serve("llama-3.1-70b", isl_range=(1000, 1048), osl_range=(250, 262), **kw)
    assert narrow.percentiles["e2e_s"]["p99"] - narrow.e2e_s < spread


@pytest.mark.parametrize("args, needle", [
    (("serve", "llama-3-8b", "--isl", "512", "--isl-range", "256-768", "--rate", "2"), "--isl and --isl-range"),
    (("serve", "llama-3-8b", "--isl-range", "768-256", "--rate", "2"), "LO <= HI"),
    (("serve", "llama-3-8b", "--isl-range", "5k-6k", "--rate", "2"), "expected LO-HI"),
    (("serve", "llama-3-8b", "--isl-range", "256-768"), "--concurrency or --rate"),
    (("serve", "llama-3-8b", "--isl-range", "256-768", "--batch", "8"), "--concurrency or --rate"),
    (("serve", "llama-3-8b", "--isl-range", "4000-8000", "--osl-range", "100-400", "--rate", "1"), "longest request"),
])
def test_bad_ranges_are_one_line(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_the_cli_prints_the_percentiles(cli):
    res = cli("serve", "llama-3-8b", "--isl-range", "256-768", "--osl-range", "64-192", "--concurrency", "16")
    assert res.code == 0, res.err
    assert "TTFT p50 / p90 / p99" in res.out and "length spread only" in res.out
    js = cli("serve", "llama-3-8b", "--isl-range", "256-768", "--concurrency", "16", "--json").json()
    assert set(js["percentiles"]) == {"ttft_s", "e2e_s", "tpot_s"}


def test_a_spread_closed_loop_runs_the_mixed_state_not_waves():
    from llmpar.cost import serving_load as load
    from llmpar.serving.deployment import deployment
    from llmpar.specs.registry import load_engine, load_hardware, load_model

    m, hw, eng = load_model("llama-3-8b"), load_hardware("h100-sxm"), load_engine("vllm")
    r = llmpar.serve("llama-3-8b", isl_range=(256, 768), osl_range=(64, 192), concurrency=16)
    d = deployment(m, hw, gpus=None, tp=None, pp=None, ep=None, weights="bf16", kv_dtype=None, spec_tokens=None,
                   acceptance=None, prefix_hit=None, dp_attention=False)
    budget = r.settings["max_num_batched_tokens"]
    mixed = load.closed_loop(m, hw, eng, d.dep(), 512, 128, 16, r.max_concurrency, budget, waves=False)
    assert r.ttft_s == pytest.approx(float(mixed["ttft_s"]), rel=1e-9)
