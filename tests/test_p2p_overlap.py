"""Pipeline p2p overlap by schedule (stacks' overlap.pp_schedules; docs/stacks.md, overlap).

Megatron-Core overlaps its pipeline sends with compute only under the interleaved schedule: the
non-interleaved 1F1B raises "Non-interleaved pipeline parallelism does not support overlapping p2p
communication" (megatron/core/pipeline_parallel/schedules.py). Until 2026-12-03 megatron-core's
overlap.pp 1.0 hid 1F1B's sends too."""

from __future__ import annotations

import numpy as np
import pytest

from llmpar import api
from llmpar.cost.pipeline import DUALPIPE, INTERLEAVED, ONE_F_ONE_B, p2p_overlap


def test_overlap_applies_only_under_the_named_schedules_on_arrays_and_scalars():
    codes = np.array([ONE_F_ONE_B, INTERLEAVED, DUALPIPE])
    assert list(p2p_overlap(1.0, ["interleaved"], codes)) == [0.0, 1.0, 0.0]
    assert list(p2p_overlap(0.5, ["dualpipe"], codes)) == [0.0, 0.0, 0.5]
    assert p2p_overlap(1.0, None, ONE_F_ONE_B) == 1.0          # unset: every schedule
    assert isinstance(p2p_overlap(1.0, ["interleaved"], INTERLEAVED), float)


def _step(schedule, **kw):
    return api.step("llama-3-70b", hardware="h100-sxm", gpus=64, tp=8, pp=4, global_batch=128, micro_batch=1,
                    schedule=schedule, **kw)


def test_megatron_core_1f1b_pays_its_sends_and_interleaved_hides_them():
    # TP 8 x PP 4 x DP 2 on 64 GPUs, global batch 128 at micro-batch 1: m = 128 / 2 = 64 per pipeline.
    # 1F1B: every micro-batch sends one activation forward and one gradient back on the critical
    # stage, blocking: pp = m x 2 x v x t_p2p = 64 x 2 x 1 x t_p2p.
    r = _step("1f1b")
    t_p2p = r.detail["parts"]["p2p_per_transfer_s"]
    assert int(r.parallel.microbatches) == 64
    assert r.breakdown_s["pp"] == pytest.approx(64 * 2 * 1 * t_p2p, rel=1e-9)
    assert t_p2p > 0
    # the explained term says the same and adds up to it
    term = next(t for t in r.terms() if t.component == "pp")
    assert term.value == pytest.approx(r.breakdown_s["pp"], rel=1e-9)
    assert "overlap.pp 0" in term.values and "interleaved only" in term.values
    # interleaved (v 2): overlap_p2p_comm hides them all (overlap.pp 1.0)
    assert _step("interleaved", virtual_stages=2).breakdown_s["pp"] == 0.0
