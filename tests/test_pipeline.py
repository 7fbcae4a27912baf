"""Pipeline schedules: in-flight micro-batches, stage sizes, bubbles, and the drawn schedule.

Every expected number is derived by hand in the comment beside it, from the formula's source.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmpar.cost import pipeline as pl
from llmpar.cost import pipeline_sim as sim
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


# --- bubbles ---------------------------------------------------------------------------------

def test_bubble_ratios_closed_forms():
    # GPipe / 1F1B, p = 4, m = 8: over ideal (p−1)/m = 3/8; fraction of step (p−1)/(m+p−1) = 3/11.
    for s in (G, F1B):
        assert pl.bubble_over_ideal(s, 4, 8) == pytest.approx(3 / 8)
        assert pl.bubble_fraction_of_step(s, 4, 8) == pytest.approx(3 / 11)
    # Interleaved v = 2: over ideal (p−1)/(v·m) = 3/16; fraction (p−1)/(v·m + p−1) = 3/19.
    assert pl.bubble_over_ideal(IL, 4, 8, 2) == pytest.approx(3 / 16)
    assert pl.bubble_fraction_of_step(IL, 4, 8, 2) == pytest.approx(3 / 19)
    # ZB-H1 with F = B = W = 1: bubble (p−1)(F+B−W) = 3, ideal m(F+B+W) = 24 -> 1/8; 3/27.
    assert pl.bubble_over_ideal(ZB, 4, 8) == pytest.approx(3 / 24)
    assert pl.bubble_fraction_of_step(ZB, 4, 8) == pytest.approx(3 / 27)
    # DualPipe p = 8, m = 16, F = B = W = 1, F&B = F + B_full = 3:
    # (p/2−1)(F&B + B_full − 3W) = 3·(3 + 2 − 3) = 6; ideal 16·3 = 48 -> 0.125; 6/54.
    assert pl.bubble_over_ideal(DP, 8, 16) == pytest.approx(6 / 48)
    assert pl.bubble_fraction_of_step(DP, 8, 16) == pytest.approx(6 / 54)


def test_seed_statements_labelled():
    # Seed 000: GPipe bubble (P−1)/M is the bubble *over ideal*: P = 8, M = 32 -> 7/32 = 0.21875,
    # which is 7/39 = 0.1795 of the step.
    assert pl.bubble_over_ideal(G, 8, 32) == pytest.approx(7 / 32)
    assert pl.bubble_fraction_of_step(G, 8, 32) == pytest.approx(7 / 39)
    # Seed 004: a naive layer split (no micro-batching, m = 1) idles (P−1)/P of the step:
    # P = 4 -> 3/4; over ideal that is P−1 = 3.
    assert pl.bubble_fraction_of_step(G, 4, 1) == pytest.approx(3 / 4)
    assert pl.bubble_over_ideal(G, 4, 1) == pytest.approx(3.0)


def test_pipeline_time_scalar():
    # 1F1B: t_f = 1 s, t_b = 2 s, p = 4, m = 8: ideal 8·3 = 24, bubble 3·3 = 9, total 33.
    assert pl.pipeline_time(1.0, 2.0, 4, 8, F1B) == pytest.approx((33.0, 9.0))
    # Interleaved v = 4: bubble 9/4 = 2.25.
    assert pl.pipeline_time(1.0, 2.0, 4, 8, IL, 4) == pytest.approx((26.25, 2.25))
    # ZB-H1, t_w = 0.8 of t_b = 2 (B = 1.2): (p−1)·max(F+B−W, F, B) = 3·max(1.4, 1, 1.2) = 4.2.
    assert pl.pipeline_time(1.0, 2.0, 4, 8, ZB, t_w=0.8) == pytest.approx((28.2, 4.2))
    # DualPipe p = 8, t_f = 1, t_b = 2, W = 1, F&B = 2.5 (some compute overlap):
    # (8/2 − 1)(2.5 + 2 − 3) = 3·1.5 = 4.5.
    assert pl.pipeline_time(1.0, 2.0, 8, 16, DP, t_w=1.0, t_fb=2.5) == pytest.approx((52.5, 4.5))
    # pp = 1: no bubble at all for any schedule.
    for s in (G, F1B, ZB):
        assert pl.pipeline_time(1.0, 2.0, 1, 5, s)[1] == 0.0


def test_pipeline_time_arrays_match_scalars():
    sched = np.array([G, F1B, IL, ZB, DP])
    pp = np.array([4, 8, 4, 8, 8])
    m = np.array([8, 16, 8, 16, 32])
    v = np.array([1, 1, 2, 1, 1])
    tf = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    tb = 2 * tf
    total, bubble = pl.pipeline_time(tf, tb, pp, m, sched, v)
    assert total.shape == bubble.shape == (5,)
    for i in range(5):
        t_i, b_i = pl.pipeline_time(float(tf[i]), float(tb[i]), int(pp[i]), int(m[i]), int(sched[i]), int(v[i]))
        assert (total[i], bubble[i]) == pytest.approx((t_i, b_i))
    # GPipe row: 0.3 s per micro-batch, bubble 3·0.3 = 0.9, total 8·0.3 + 0.9 = 3.3.
    assert (total[0], bubble[0]) == pytest.approx((3.3, 0.9))


def test_feasibility_and_checks():
    # Megatron interleaving needs m % p == 0; DualPipe even p, even m >= 2p.
    mask = pl.schedule_feasible(np.array([IL, IL, DP, DP, DP, F1B, F1B]), np.array([4, 4, 8, 8, 7, 4, 4]),
                                np.array([8, 6, 16, 14, 14, 3, 3]), np.array([2, 2, 1, 1, 1, 1, 2]))
    np.testing.assert_array_equal(mask, [True, False, True, False, False, True, False])
    from llmpar.errors import UserError
    with pytest.raises(UserError, match="multiple of --pp"):
        pl.check_schedule(IL, 4, 6, 2)
    with pytest.raises(UserError, match="even --pp"):
        pl.check_schedule(DP, 3, 12)
    with pytest.raises(UserError, match="needs --schedule interleaved"):
        pl.check_schedule(F1B, 4, 8, 2)


# --- the drawn schedule agrees with the formulas ---------------------------------------------

@pytest.mark.parametrize("s,p,m,v", [(G, 4, 8, 1), (F1B, 4, 8, 1), (F1B, 8, 3, 1), (G, 1, 4, 1),
                                     (IL, 4, 8, 2), (IL, 2, 6, 3), (ZB, 4, 8, 1), (ZB, 4, 2, 1)])
def test_timeline_idle_equals_formula(s, p, m, v):
    # Unit times F = 1, backward 2 (ZB-H1: B = 1, W = 1). GPipe/1F1B: the flush lasts
    # (m+p−1)·3 and each stage is busy 3m, so idle = (p−1)/(m+p−1).
    t = sim.timeline(s, p, m, v)
    assert t.idle_fraction == pytest.approx(pl.bubble_fraction_of_step(s, p, m, v))
    # every stage runs each (micro-batch, chunk) forward and backward exactly once
    for row in t.stages:
        fw = sorted((x.microbatch, x.chunk) for x in row if x.kind == "F")
        assert fw == sorted((j, c) for j in range(m) for c in range(v))
        assert len([x for x in row if x.kind == "B"]) == m * v
        assert all(a.end <= b.start for a, b in zip(row, row[1:]))


def test_timeline_1f1b_shape():
    # p = 4, m = 8, 1F1B: stage 0 runs 3 warm-up forwards then F3 at t = 3; B0 comes back after
    # F0 went through 4 stages (t = 4) and B0 through stages 3, 2, 1 (2 each): starts at 4 + 6 = 10.
    t = sim.timeline(F1B, 4, 8)
    row0 = t.stages[0]
    assert [(x.kind, x.microbatch) for x in row0[:5]] == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0)]
    assert row0[4].start == 10.0
    assert t.total == 33.0   # (8 + 4 − 1)·3
    # peak in-flight on stage 0 = forwards before its first backward = 4 = min(p, m)
    assert sum(1 for x in row0[:4] if x.kind == "F") == pl.in_flight_microbatches(F1B, 4, 8)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (8, 16), (8, 20), (16, 32)])
def test_dualpipe_timeline_idle_equals_table_2(p, m):
    # deepseek-ai/DualPipe's own op order, simulated (cost.pipeline_sim._order_dualpipe): with unit
    # times (F = B_input = W = 1, F&B = F + B_full = 3) every device is busy m(F + B_full) = 3m and
    # idle (p/2 - 1)(F&B + B_full - 3W) = (p/2 - 1)(3 + 2 - 3) = p - 2 (DeepSeek-V3 Table 2):
    # p = 8, m = 16 lasts 48 + 6 = 54 units, idle 6/54 = 0.1111.
    t = sim.timeline(DP, p, m)
    assert t.total == 3 * m + (p - 2)
    assert t.idle_fraction == pytest.approx(pl.bubble_fraction_of_step(DP, p, m))
    for i, row in enumerate(t.stages):
        # each device runs every micro-batch of both directions forward and backward once
        # (direction 0: 0..m/2-1, direction 1: m/2..m-1; chunk = direction), and its deferred
        # weight gradients once each
        assert sorted(x.microbatch for x in row if x.kind == "F") == list(range(m))
        assert sorted((x.microbatch, x.chunk) for x in row if x.kind == "F") == \
            [(j, 0) for j in range(m // 2)] + [(j, 1) for j in range(m // 2, m)]
        assert sorted(x.microbatch for x in row if x.kind == "B") == list(range(m))
        assert len([x for x in row if x.kind == "W"]) == len([x for x in row if x.kind == "B" and x.end - x.start == 1])
        assert all(a.end <= b.start for a, b in zip(row, row[1:]))
        assert sum(x.end - x.start for x in row) == 3 * m


def test_dualpipe_timeline_start_by_hand():
    # p = 4, m = 8 (DualPipe.step): device 0 (first half, half_rank 0) runs step 1, 2 forwards of
    # direction 0 (F0 F1), step 2 one forward pair (F2 of direction 0, F4 = the first micro-batch
    # of direction 1, which enters at device 3 and reaches device 0, its stage 3, at t = 3), then
    # step 3's zero-bubble B4 (input gradient, 1 unit), W4, F5.
    t = sim.timeline(DP, 4, 8)
    row0 = [(x.kind, x.microbatch) for x in t.stages[0][:7]]
    assert row0 == [("F", 0), ("F", 1), ("F", 2), ("F", 4), ("B", 4), ("W", 4), ("F", 5)]
    assert t.stages[0][3].start == 3.0
    # device 3 mirrors it with the directions swapped
    assert [(x.kind, x.microbatch) for x in t.stages[3][:6]] == [("F", 4), ("F", 5), ("F", 6), ("F", 0), ("B", 0),
                                                                 ("W", 0)]


@pytest.mark.parametrize("tf,tb,tw", [(1.0, 1.2, 0.8), (1.0, 1.0, 0.2), (1.0, 2.0, 2.0),    # 2B - W >= F: Table 2
                                      (1.0, 0.8, 0.8), (1.0, 0.5, 1.0), (1.0, 0.5, 0.5)])   # below: (p/2-1)·2F
def test_dualpipe_pipeline_time_equals_simulation(tf, tb, tw):
    # The simulated flush lasts m(F + B_full) + (p/2 - 1)·max(F&B + B_full - 3W, 2F), F&B = F + B_full,
    # in these cases (with W = B_input it holds for any F and B); F = 1, B_input = 0.5, W = 0.25 binds
    # another chain (below):
    # By hand for p = 8, m = 16, (F, B, W) = (1, 1.2, 0.8): B_full = 2, F&B = 3,
    # 16·3 + 3·max(3 + 2 - 2.4, 2) = 48 + 7.8 = 55.8; (1, 0.8, 0.8): 16·2.6 + 3·max(1.8, 2) = 47.6.
    p, m = 8, 16
    t = sim.timeline(DP, p, m, 1, tf, tb, tw)
    total, _ = pl.pipeline_time(tf, tb + tw, p, m, DP, t_w=tw)
    assert float(total) == pytest.approx(t.total)
    if (tf, tb, tw) == (1.0, 1.2, 0.8):
        assert t.total == pytest.approx(55.8)
    if (tf, tb, tw) == (1.0, 0.8, 0.8):
        assert t.total == pytest.approx(47.6)
    # a split far from W = B_input: the simulation idles 0.25 more per device pair (documented)
    t = sim.timeline(DP, 4, 8, 1, 1.0, 0.5, 0.25)
    total, _ = pl.pipeline_time(1.0, 0.75, 4, 8, DP, t_w=0.25)
    assert t.total == pytest.approx(float(total) + 0.25)


try:
    from hypothesis import given, strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    @given(st.sampled_from([G, F1B, IL, ZB, DP]), st.integers(1, 6), st.integers(1, 4), st.integers(2, 3),
           st.sampled_from([0.5, 1.0, 1.5]), st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.25, 1.0, 1.5]))
    def test_pipeline_time_equals_simulated_schedule(s, p, k, v, tf, tb, tw):
        # The closed forms of pipeline_time are exact for this module's schedules, for any chunk
        # times: the simulated flush (list scheduling of each stage's op order) lasts as long.
        if s == IL:
            p = max(p, 2)
            m = p * k
        elif s == DP:   # p even, m even and >= 2p; F&B = F + B_full (the pair's compute, serial);
            # W = B_input, the split pipeline_time assumes (docstring: other splits can bind other chains)
            p, v = 2 * ((p + 1) // 2), 1
            m = 2 * p + 2 * (k - 1)
            tw = tb
        else:
            m, v = k * 2 + p % 3, 1
        t = sim.timeline(s, p, m, v, tf, tb, tw)
        total, _ = pl.pipeline_time(tf * v, (tb + tw) * v, p, m, s, v, t_w=tw * v)
        assert total == pytest.approx(t.total)


def test_dualpipe_paired_share_is_the_orders_count():
    # the share of forwards run as an overlapped F&B pair on the least-paired device, counted from
    # DualPipe.step's own order (_order_dualpipe; a middle device's first main step is drawn as a
    # pair but the code runs it unoverlapped), against the closed form m - 3p/2 + 1 (p >= 4) / m - 3
    # (p = 2). DeepSeek-V3's p = 16, m = 120: 97 of 120 (23 forwards and 23 backwards run alone).
    from llmpar.cost.pipeline import dualpipe_paired_share
    from llmpar.cost.pipeline_sim import _order_dualpipe

    for p in (2, 4, 6, 8, 16):
        for m in range(2 * p, 6 * p + 1, 2):
            counts = []
            for r in range(p):
                order = _order_dualpipe(p, m, r)
                pairs = sum(op[0] == "FB" for op in order) - (r in (p // 2 - 1, p // 2))
                assert sum(op[0] in ("F", "Fl", "FB") for op in order) == m
                counts.append(pairs)
            assert float(dualpipe_paired_share(p, m)) == pytest.approx(min(counts) / m), (p, m)
    assert float(dualpipe_paired_share(16, 120)) == pytest.approx(97 / 120)
    assert dualpipe_paired_share(np.array([16, 8]), np.array([120, 16])) == pytest.approx([97 / 120, 5 / 16])
