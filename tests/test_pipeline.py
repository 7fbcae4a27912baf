"""Pipeline schedules: in-flight micro-batches, stage sizes, bubbles, and the drawn schedule.

Every expected number is derived by hand in the comment beside it, from the formula's source.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmpar.cost import pipeline as pl
from llmpar.parallel import SCHEDULES

G, F1B, IL, ZB, DP = (SCHEDULES.index(s) for s in ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe"))


# --- in-flight micro-batches -----------------------------------------------------------------

def test_in_flight_scalar_per_schedule():
    # GPipe keeps all m forwards: m = 8.
    assert pl.in_flight_microbatches(G, 4, 8) == 8
    # 1F1B: min(p, m) = min(4, 8) = 4; with m < p only m exist: min(4, 2) = 2.
    assert pl.in_flight_microbatches(F1B, 4, 8) == 4
    assert pl.in_flight_microbatches(F1B, 4, 2) == 2
    # Interleaved (Korthikanti §4.2.3): 4 · (1 + 3/(4·2)) = 4 · 1.375 = 5.5.
    assert pl.in_flight_microbatches(IL, 4, 8, 2) == pytest.approx(5.5)
    # ZB-H1 = 1F1B: 4.
    assert pl.in_flight_microbatches(ZB, 4, 8) == 4
    # DualPipe (DeepSeek-V3 Table 2): p + 1 = 5; capped by m = 3 when only 3 exist.
    assert pl.in_flight_microbatches(DP, 4, 8) == 5
    assert pl.in_flight_microbatches(DP, 4, 3) == 3


def test_in_flight_arrays_match_scalars():
    sched = np.array([G, F1B, IL, ZB, DP, IL])
    pp = np.array([4, 4, 4, 8, 8, 16])
    m = np.array([8, 8, 8, 32, 32, 64])
    v = np.array([1, 1, 2, 1, 1, 4])
    got = pl.in_flight_microbatches(sched, pp, m, v)
    assert isinstance(got, np.ndarray) and got.shape == (6,)
    # 16 stages, v = 4: 16 · (1 + 15/64) = 16 + 3.75 = 19.75.
    np.testing.assert_allclose(got, [8, 4, 5.5, 8, 9, 19.75])
    for i in range(6):
        assert got[i] == pytest.approx(pl.in_flight_microbatches(int(sched[i]), int(pp[i]), int(m[i]), int(v[i])))


def test_parameter_copies():
    # DeepSeek-V3 Table 2: DualPipe 2x parameters, the others 1x.
    assert pl.parameter_copies(DP) == 2
    assert pl.parameter_copies(F1B) == 1
    np.testing.assert_array_equal(pl.parameter_copies(np.array([G, DP])), [1, 2])


# --- stage sizes -----------------------------------------------------------------------------

def test_stage_layers_uneven():
    # Llama-3.1-405B: 126 layers on pp = 16 -> ceil(126/16) = ceil(7.875) = 8 on the busiest stage;
    # d = 16·8 − 126 = 2: first and last stages one short -> 7 and 7 (Llama 3 §3.3.2);
    # check: 7 + 7 + 14·8 = 126.
    assert pl.stage_layers(126, 16) == 8
    assert pl.first_stage_layers(126, 16) == 7
    assert pl.last_stage_layers(126, 16) == 7
    # DeepSeek-V3: 61 on 16 -> ceil = 4, d = 64 − 61 = 3: last 3, first 3, one middle stage 3.
    assert pl.stage_layers(61, 16) == 4
    assert pl.last_stage_layers(61, 16) == 3
    assert pl.first_stage_layers(61, 16) == 3
    # Even split: Llama-3-70B 80 on 8 -> 10 everywhere.
    assert (pl.stage_layers(80, 8), pl.first_stage_layers(80, 8), pl.last_stage_layers(80, 8)) == (10, 10, 10)
    # d = 1: only the last stage is short: 31 on 4 -> 8, first 8, last 7 (8+8+8+7 = 31).
    assert (pl.stage_layers(31, 4), pl.first_stage_layers(31, 4), pl.last_stage_layers(31, 4)) == (8, 8, 7)


def test_stage_layers_arrays():
    L = np.array([126, 61, 80, 31, 96])
    p = np.array([16, 16, 8, 4, 1])
    np.testing.assert_array_equal(pl.stage_layers(L, p), [8, 4, 10, 8, 96])
    np.testing.assert_array_equal(pl.first_stage_layers(L, p), [7, 3, 10, 8, 96])
    np.testing.assert_array_equal(pl.last_stage_layers(L, p), [7, 3, 10, 7, 96])
