"""Plan rows are layouts, not interleaving depths (newcomer review, item 17: one layout at v 40,
20, 10, ... and 1F1B filled rows 1-8 of `plan llama-3-70b --gpus 16`)."""

import numpy as np

from llmpar.parallel import SCHEDULES, Parallel
from llmpar.planner.families import Families
from llmpar.planner.ranking import TieGroups

I, F, Z = SCHEDULES.index("interleaved"), SCHEDULES.index("1f1b"), SCHEDULES.index("zb-h1")


def _case():
    """Six candidates, already in rank order (times 1..6, no ties):
    0: tp2 pp4 interleaved v4   -> row 1
    1: tp4 pp2 1f1b             -> row 2
    2: tp2 pp4 interleaved v2   -> folds into row 1
    3: tp2 pp4 1f1b             -> folds into row 1 (1F1B is v = 1)
    4: tp2 pp4 zb-h1            -> row 3 (another schedule, not a depth)
    5: tp4 pp2 interleaved v2   -> folds into row 2"""
    par = Parallel(tp=np.array([2, 4, 2, 2, 2, 4]), pp=np.array([4, 2, 4, 4, 4, 2]), dp=1,
                   schedule=np.array([I, F, I, F, Z, I]), virtual_stages=np.array([4, 1, 2, 1, 1, 2]))
    t = np.arange(1.0, 7.0)
    groups = TieGroups(np.arange(6), t, t)
    return Families(groups, par)


def test_rows_fold_depths_and_keep_other_schedules():
    f = _case()
    assert f.take(10) == [0, 1, 4]
    assert f.variants == {0: [2, 3], 1: [5], 4: []}


def test_take_scans_only_as_far_as_needed():
    f = _case()
    assert f.take(1) == [0]
    assert f._next == 1


def test_every_group_numbered_as_the_rows_are():
    """ranks per group: 1, 2, 1, 1, 3, 2 (a folded group carries its row's rank)."""
    assert _case().rank_of_groups().tolist() == [1, 2, 1, 1, 3, 2]


def test_plan_lists_one_row_per_layout(cli):
    """llama-3-70b on 16 H100s: 17 layouts fit, two of them distinct once depths fold (the
    review's eight rows were tp8 pp2 at v 40, 20, 10, 8, 5, 4, 2 and 1F1B)."""
    res = cli("plan", "llama-3-70b", "--gpus", "16", "--json")
    assert res.code == 0, res.err
    plans = res.json()["plans"]
    assert res.json()["space"]["feasible"] == 17 and len(plans) == 2
    assert [p["rank"] for p in plans] == list(range(1, len(plans) + 1))
    keys = [tuple(p["parallel"][k] for k in ("tp", "pp", "dp", "cp", "zero", "recompute", "micro_batch"))
            for p in plans]
    assert len(keys) == len(set(keys))          # no layout twice
    best = plans[0]
    assert best["parallel"]["schedule"] == "interleaved" and best["variants"]
    depths = {(v["schedule"], v["virtual_stages"]) for v in best["variants"]}
    assert ("1f1b", 1) in depths
    assert all(v["step_time_s"] >= best["step_time_s"] for v in best["variants"])


def test_every_layout_knob_but_the_depth_separates_families():
    """The family key reads Parallel's fields: a knob added there separates rows without an edit
    here; schedule and virtual_stages are the only ones left out."""
    from dataclasses import fields

    from llmpar.planner import families

    assert set(families._KNOBS) == {f.name for f in fields(Parallel)} - {"schedule", "virtual_stages"}
