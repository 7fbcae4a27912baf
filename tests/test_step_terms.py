"""`step --explain` / `step --json` terms (cost/step_explain.py): each component's counted term is
computed from the per-layer parts by the formula it prints, so it must equal the breakdown that
cost/step.py computed its own way. Layouts chosen to switch every term on: PP with interleaving
(p2p, bubble), TP with SP, CP, MoE with EP, full recompute, activation offload, ZeRO-3 with
parameter offload, FP8 with BF16 boundary layers."""

from __future__ import annotations

import json

import pytest

import llmpar

CASES = [
    ("llama-3-70b", dict(gpus=64, tp=8, pp=4, zero=1, global_batch=128, virtual_stages=2)),
    ("llama-3-70b", dict(gpus=64, tp=8, pp=4, zero=1, global_batch=128, stack="nanotron")),  # blocking p2p
    ("llama-3-70b", dict(gpus=64, tp=8, pp=2, cp=2, zero=1, global_batch=128, seq=16384, recompute="full")),
    ("mixtral-8x7b", dict(gpus=64, tp=2, pp=1, ep=8, zero=1, global_batch=256)),
    ("llama-3-8b", dict(gpus=16, tp=1, cp=16, zero=1, global_batch=16, seq=8192)),   # CP beyond its attention
    ("llama-3-8b", dict(gpus=8, tp=1, pp=1, zero=1, global_batch=64, offload_layers=16)),
    ("llama-3-70b", dict(gpus=8, tp=1, zero=3, recompute="full", stack="deepspeed", param_offload=True,
                         global_batch=64)),
    ("llama-3-70b", dict(gpus=64, tp=8, pp=2, zero=1, global_batch=128, dtype="fp8")),
    ("llama-3-70b", dict(gpus=64, tp=8, pp=2, zero=1, global_batch=128, dtype="fp8", recompute="selective")),
]


@pytest.mark.parametrize("model,kw", CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CASES)])
def test_counted_terms_add_up_to_each_component(model, kw):
    r = llmpar.step(model, **kw)
    terms = r.terms()
    counted = {}
    for t in terms:
        if t.counted:
            counted[t.component] = counted.get(t.component, 0.0) + t.value
    assert set(counted) == set(r.breakdown_s)
    # bubble, dp and optimizer carry the breakdown's own values (their windows are cost/pipeline's
    # and _data_parallel's), as do compute / recompute when FP8's BF16 layers hold recompute time
    # (cost/step_explain.py): checking those would compare a number with itself, so only the
    # components the explanation computes from the per-layer parts are checked
    parts = r.detail["parts"]
    copied = {"bubble", "dp", "optimizer"}
    if parts["bf16_layers_extra_s"]:
        copied |= {"recompute"} | ({"compute"} if r.parallel.recompute else set())
    derived = set(r.breakdown_s) - copied
    assert {"compute", "tp", "pp", "cp", "ep", "offload", "fixed"} - {"compute"} <= derived
    for comp in derived:
        assert counted[comp] == pytest.approx(r.breakdown_s[comp], rel=1e-9, abs=1e-12), comp
    # the parts are shown, not added (all of them the compute's per-layer pieces)
    shown = [t for t in terms if not t.counted]
    assert shown and all(t.component == "compute" for t in shown)


def test_some_terms_are_on_in_these_cases():
    # the cases above exercise the terms they claim to (else the sums would be 0 = 0)
    on = set()
    for model, kw in CASES:
        on |= {k for k, v in llmpar.step(model, **kw).breakdown_s.items() if v > 0}
    assert {"compute", "recompute", "tp", "pp", "bubble", "dp", "cp", "ep", "offload", "optimizer", "fixed"} <= on


def test_step_json_carries_the_terms(cli):
    res = cli("step", "llama-3-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--zero", "1", "--global-batch", "128",
              "--json")
    assert res.code == 0, res.err
    terms = json.loads(res.out)["terms"]
    assert {t["component"] for t in terms} >= {"compute", "tp", "bubble", "dp"}
    assert all(set(t) == {"component", "name", "seconds", "formula", "values", "source", "counted"} for t in terms)
