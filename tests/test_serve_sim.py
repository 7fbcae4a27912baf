"""`serve --simulate N`: the discrete-event run of one replica's scheduler (cost/serving_sim.py;
docs/serving.md, Simulated tails).

The scheduler is checked by hand with every iteration fixed at 10 ms (the step table replaced):
which iteration computes which prompt chunk, when a request's first and last tokens come, and
what the KV pool makes wait. The real step table is checked against the fluid model's figures.
"""

from __future__ import annotations

import pytest

import llmpar
from llmpar.cost import serving_sim as SIM
from llmpar.serving.deployment import deployment
from llmpar.specs.registry import load_engine, load_hardware, load_model
from tests.conftest import assert_one_line_error


@pytest.fixture
def flat(monkeypatch):
    """Every iteration 10 ms, whatever it carries."""
    monkeypatch.setattr(SIM, "step_table", lambda *a, **k: ([0.0, 1e9], [0.0, 1e9], [[0.01, 0.01], [0.01, 0.01]]))


def _run(engine="vllm", **kw):
    m, hw, eng = load_model("llama-3-8b"), load_hardware("h100-sxm"), load_engine(engine)
    d = deployment(m, hw, gpus=None, tp=None, pp=None, ep=None, weights="bf16", kv_dtype=None, spec_tokens=None,
                   acceptance=None, prefix_hit=None, dp_attention=False)
    base = dict(kv_tokens=1e9, max_seqs=256, budget=8192)
    return SIM.simulate(m, hw, eng, d.dep(), **{**base, **kw})


def test_one_request_takes_one_prefill_iteration_then_one_per_token(flat):
    # 100 prompt tokens fit one 8,192-token iteration: first token at 10 ms after arrival; 4 more
    # tokens, 4 more iterations: e2e 50 ms, TPOT 40 ms / 4 = 10 ms
    s = _run(isl_range=(100, 100), osl_range=(5, 5), n_requests=1, rate=1.0)
    assert s["ttft_s"]["mean"] == pytest.approx(0.010)
    assert s["e2e_s"]["mean"] == pytest.approx(0.050)
    assert s["tpot_s"]["mean"] == pytest.approx(0.010)


def test_chunked_prefill_splits_the_budget_first_come_first_served(flat):
    # two prompts of 5,000 at t = 0: iteration 1 computes 5,000 + 3,192 (first token of #0 at 10 ms),
    # iteration 2 one decode token + #1's last 1,808 (first token at 20 ms); 3 output tokens each:
    # #0 ends at 30 ms, #1 at 40 ms
    s = _run(isl_range=(5000, 5000), osl_range=(3, 3), n_requests=2, concurrency=2)
    assert s["ttft_s"]["p50"] == pytest.approx(0.015) and s["ttft_s"]["mean"] == pytest.approx(0.015)
    assert s["e2e_s"]["mean"] == pytest.approx(0.035)
    assert s["tpot_s"]["mean"] == pytest.approx(0.010)


def test_a_prefill_of_its_own_makes_the_decodes_wait(flat):
    # SGLang (scheduler.mixed_prefill false): the same two prompts of 5,000 at t = 0. Iteration 1 is
    # prefill only (the whole 8,192 budget: #0's 5,000, first token at 10 ms, and 3,192 of #1);
    # iteration 2 is prefill only too (#1's last 1,808: first token at 20 ms), so #0's decodes wait;
    # iterations 3 and 4 decode both: both end at 40 ms. TTFT mean 15 ms, e2e 40 ms, TPOT
    # ((40 - 10)/2 + (40 - 20)/2)/2 = 12.5 ms (mixed, above: e2e 35 ms, TPOT 10 ms)
    s = _run(engine="sglang", isl_range=(5000, 5000), osl_range=(3, 3), n_requests=2, concurrency=2)
    assert s["ttft_s"]["mean"] == pytest.approx(0.015)
    assert s["e2e_s"]["mean"] == pytest.approx(0.040)
    assert s["tpot_s"]["mean"] == pytest.approx(0.0125)


def test_a_full_kv_pool_makes_the_next_request_wait(flat):
    # a pool of 6,000 tokens holds one request of 5,003: #1 is admitted when #0 ends (30 ms), prefilled
    # in iteration 4 (first token 40 ms) and ends at 60 ms
    s = _run(isl_range=(5000, 5000), osl_range=(3, 3), n_requests=2, concurrency=2, kv_tokens=6000)
    assert s["ttft_s"]["mean"] == pytest.approx((0.010 + 0.040) / 2)
    assert s["e2e_s"]["mean"] == pytest.approx((0.030 + 0.060) / 2)


def test_the_simulated_means_meet_the_fluid_model_and_the_tail_is_wider():
    r = llmpar.serve("llama-3.1-70b", tp=4, isl=1024, osl=256, rate=4, simulate=2000)
    s = r.simulation
    # the same iterations, the same load: means within 25 % (the fluid model is their mean-value form)
    assert s["tpot_s"]["mean"] == pytest.approx(r.tpot_s, rel=0.1)
    assert s["e2e_s"]["mean"] == pytest.approx(r.e2e_s, rel=0.1)
    assert s["ttft_s"]["mean"] == pytest.approx(r.ttft_s, rel=0.25)
    assert s["output_tokens_per_s"] == pytest.approx(r.output_tokens_per_s, rel=0.05)
    # Poisson bunching: TTFT's p99 is well above its median
    assert s["ttft_s"]["p99"] > 2 * s["ttft_s"]["p50"]
    again = llmpar.serve("llama-3.1-70b", tp=4, isl=1024, osl=256, rate=4, simulate=2000)
    assert again.simulation == s                     # seeded: the same run
    other = llmpar.serve("llama-3.1-70b", tp=4, isl=1024, osl=256, rate=4, simulate=2000, seed=1)
    assert other.simulation["ttft_s"] != s["ttft_s"]
    # SGLang's prefill iterations of their own, in both: the same means (TPOT 40.2 ms fluid, 39.8 ms
    # simulated when this was written)
    sg = llmpar.serve("llama-3.1-70b", tp=4, isl=1024, osl=256, rate=4, simulate=2000, engine="sglang")
    assert sg.simulation["tpot_s"]["mean"] == pytest.approx(sg.tpot_s, rel=0.1)
    assert sg.simulation["output_tokens_per_s"] == pytest.approx(sg.output_tokens_per_s, rel=0.05)


@pytest.mark.parametrize("args, needle", [
    (("serve", "llama-3-8b", "--concurrency", "8", "--simulate", "100"), "Poisson --rate"),
    (("serve", "llama-3-8b", "--simulate", "100"), "Poisson --rate"),
    (("serve", "llama-3-8b", "--rate", "2", "--simulate", "20000"), "--simulate"),
    (("serve", "llama-3-8b", "--rate", "2", "--simulate", "0"), "--simulate"),
    (("serve", "llama-3-8b", "--rate", "2", "--simulate", "10", "--seed", "-1"), "--seed"),
])
def test_bad_simulations_are_one_line(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_the_cli_prints_the_simulated_table(cli):
    res = cli("serve", "llama-3-8b", "--rate", "4", "--isl-range", "256-768", "--osl-range", "64-192", "--simulate", "500")
    assert res.code == 0, res.err
    assert "simulated" in res.out and "p99" in res.out
    js = cli("serve", "llama-3-8b", "--rate", "4", "--simulate", "300", "--json").json()
    assert js["simulation"]["requests"] == 300 and set(js["simulation"]["ttft_s"]) == {"mean", "p50", "p90", "p99"}


def test_a_seed_of_none_is_the_default_seed():
    # the API's None means "the documented default", seed 0: the same run as seed=0, figure for figure
    a = llmpar.serve("llama-3-8b", rate=2, simulate=50, seed=None).model_dump()["simulation"]
    b = llmpar.serve("llama-3-8b", rate=2, simulate=50, seed=0).model_dump()["simulation"]
    assert a["seed"] == 0 and a == b
