"""Full recompute of N layers per pipeline chunk (Megatron-Core ``--recompute-granularity full
--recompute-method block --recompute-num-layers N``; `--recompute-layers N`): the other layers run
without recompute. cost/pipeline.py full_recompute_fraction; docs/memory.md and docs/time-model.md."""

from __future__ import annotations

import numpy as np
import pytest

from llmpar import api
from llmpar.calibrate.runs_layouts import recompute_layer_counts
from llmpar.cost.pipeline import chunk_layers, full_recompute_fraction, partial_recompute_layers

FULL = 2


def test_fraction_of_a_chunk():
    # Llama 3.1 405B: 126 layers on pp 16 -> 8 on the busiest stage; v = 4 -> 2 per chunk
    assert chunk_layers(126, 16, 4) == 2 and chunk_layers(126, 16) == 8
    assert full_recompute_fraction(126, 16, 4, 1) == 0.5
    assert full_recompute_fraction(126, 16, 4, 2) == 1.0
    assert full_recompute_fraction(126, 16, 4, 0) == 1.0          # 0 = every layer (the default)
    assert full_recompute_fraction(32, 1, 1, 8) == 0.25


KW = dict(hardware="h100-sxm", gpus=1, micro_batch=1, global_batch=4, seq=4096, recompute="full")


def test_memory_by_hand():
    # Llama-3-8B on one GPU (pp 1: one micro-batch's activations in flight), b = 1, s = 4096.
    # Per token and layer the fused set keeps 139,392 B without recompute and the 2h = 8,192 B
    # layer input under full recompute (docs/memory.md). Recomputing 16 of the 32 layers keeps the
    # other 16 whole: 16 x (139,392 - 8,192) x 4,096 = 8,598,323,200 B more than all 32.
    all32 = api.memory("llama-3-8b", **KW).model_dump()["memory"]["activations_bytes"]
    half = api.memory("llama-3-8b", recompute_layers=16, **KW).model_dump()["memory"]["activations_bytes"]
    assert half - all32 == pytest.approx(16 * (139_392 - 8_192) * 4096, rel=1e-12)
    assert 16 * (139_392 - 8_192) * 4096 == 8_598_323_200


def test_time_and_flops_scale_with_the_share():
    # the re-run forward, its TP traffic and its FLOPs are the share N/L of full recompute's
    full = api.step("llama-3-8b", **KW).model_dump()
    half = api.step("llama-3-8b", recompute_layers=16, **KW).model_dump()
    none = api.step("llama-3-8b", **{**KW, "recompute": "none"}).model_dump()
    assert half["breakdown_s"]["recompute"] == pytest.approx(full["breakdown_s"]["recompute"] / 2, rel=1e-12)
    extra = {k: d["detail"]["hardware_flops_per_step"] - d["detail"]["model_flops_per_step"]
             for k, d in (("full", full), ("half", half), ("none", none))}
    assert extra["half"] == pytest.approx((extra["full"] + extra["none"]) / 2, rel=1e-12)
    assert half["parallel"]["recompute_layers"] == 16 and full["parallel"]["recompute_layers"] == 0


@pytest.mark.parametrize("args, needle", [
    (("--recompute", "selective", "--recompute-layers", "2"), "needs --recompute full"),
    (("--recompute", "full", "--recompute-layers", "9", "--pp", "16"), "exceeds the 8 layers of a pipeline chunk"),
    # 0 is "every layer", as the JSON writes it (a result's layout feeds back: test_review_s3.py);
    # below 0 is bad input
    (("--recompute", "full", "--recompute-layers", "-1"), "recompute-layers"),
])
def test_bad_recompute_layers_is_one_line_exit_2(cli, args, needle):
    res = cli("step", "llama-3.1-405b", "--gpus", "128", "--tp", "8", *args)
    assert res.code == 2 and needle in res.err and len(res.err.strip().splitlines()) == 1


def test_published_runs_search_it_only_when_they_leave_recompute_out():
    # a tuned run that does not state its recompute: all layers (0) and about 1/8 .. 7/8 of a chunk
    assert recompute_layer_counts(FULL, None, None, 8) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert recompute_layer_counts(FULL, None, None, 2) == [0, 1]
    assert recompute_layer_counts(FULL, None, None, 1) == [0]
    # a run that says "full" means every layer unless it also says how many
    assert recompute_layer_counts(FULL, "full", None, 8) == [0]
    assert recompute_layer_counts(FULL, "full", 3, 8) == [3]
    assert recompute_layer_counts(1, None, None, 8) == [0]


def test_more_recomputed_layers_less_memory_more_time():
    # each layer moved from "kept whole" to "checkpointed" saves (none - checkpoint) bytes and
    # adds one layer's forward: memory falls and step time rises strictly with N, and N = all
    # layers of the chunk is --recompute full (Llama-3-70B, 80 layers, pp 4 -> 20 per stage, v 2 -> 10)
    kw = dict(hardware="h100-sxm", gpus=32, tp=4, pp=4, micro_batch=1, global_batch=64, seq=4096,
              recompute="full", virtual_stages=2)
    mem, time = [], []
    for n in range(1, 11):
        r = api.step("llama-3-70b", recompute_layers=n, **kw).model_dump()
        mem.append(r["memory"]["activations_bytes"])
        time.append(r["step_time_s"])
    assert all(a > b for a, b in zip(mem, mem[1:]))
    assert all(a < b for a, b in zip(time, time[1:]))
    full = api.step("llama-3-70b", **kw).model_dump()
    assert full["memory"]["activations_bytes"] == pytest.approx(mem[-1], rel=1e-12)
    assert full["step_time_s"] == pytest.approx(time[-1], rel=1e-12)


def test_partial_counts_round_half_to_even_at_least_one():
    # one rule for the planner's grid (1/4, 1/2, 3/4) and calibrate runs' (1/8 .. 7/8):
    # share 1/2 of 5 layers = 2.5 -> 2 (half to even, as Python's round), 1/8 of 4 = 0.5 -> at least 1,
    # 3/4 of 8 = 6; share 0 = 0 (every layer)
    assert partial_recompute_layers(0.5, 5) == 2 and partial_recompute_layers(0.125, 4) == 1
    assert partial_recompute_layers(0.75, 8) == 6 and partial_recompute_layers(0.0, 8) == 0
    assert list(partial_recompute_layers(np.array([0.0, 0.25, 0.5, 0.75]), 4)) == [0, 1, 2, 3]
