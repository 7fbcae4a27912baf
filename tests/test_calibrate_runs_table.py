"""`calibrate runs` says what it searched and what it left out (newcomer review, §5): the layout
cell shows cp and v and marks searched knobs, the source is printed whole, a fitted value on its
bound prints as the bound, and a step far off the prediction is named instead of read silently as
a 49,298 % error."""

import dataclasses

import pytest

from llmpar.calibrate import runs as R
from llmpar.calibrate import runs_layouts as RL
from llmpar.calibrate.runs_predict import FAR_OFF
from llmpar.cli.calibrate_runs_cmd import _at_bound
from llmpar.cli.render import layout_short
from llmpar.specs import load_stack

CSV = """model,gpus,tp,pp,cp,virtual_stages,zero,micro_batch,global_batch,seq,step_time_s
llama-3-8b,8,1,1,2,1,1,1,64,8192,8.05
llama-3-70b,64,8,4,1,5,1,1,128,8192,31.5
"""


def test_layout_cell_shows_cp_v_and_searched_knobs():
    d = {"tp": 8, "pp": 4, "dp": 2, "cp": 2, "zero": 1, "recompute": "none", "recompute_layers": 0,
         "micro_batch": 1, "microbatches": 64, "virtual_stages": 5}
    assert layout_short(d) == "tp8 pp4 dp2 cp2 z1 b1 m64 v5"
    assert layout_short(d, {"recompute", "microbatches"}) == "tp8 pp4 dp2 cp2 z1 none* b1 m64* v5"


def test_runs_table_prints_cp_v_source_and_the_searched_mark(cli, tmp_path):
    table = tmp_path / "my_runs.csv"
    table.write_text(CSV)
    res = cli("calibrate", "runs", str(table), "--hardware", "h100-sxm", "--check")
    assert res.code == 0, res.err            # --check without --tolerance reports, never fails
    out = res.out
    assert "my_runs.csv:2" in out and "my_runs.csv:3" in out
    assert "cp2" in out and "v5" in out
    assert "none*" in out and "* not stated by the run" in out


def test_value_on_its_bound_prints_as_the_bound():
    """memory.allocator_overhead is bounded to [0, 1]: 2.518e-19 is 0 to within 1e-6 of the range."""
    assert _at_bound("memory.allocator_overhead", 2.518e-19) == "0 (at bound)"
    assert _at_bound("kernels.gemm_efficiency", 1.0 - 1e-9) == "1 (at bound)"
    assert _at_bound("kernels.gemm_efficiency", 0.6101) == "0.6101"


def test_far_off_step_is_named_and_its_weight_bounded():
    """Two runs at the base stack's own predictions fit gemm_efficiency at its base value, 0.7452.
    A third run measured at 500x its prediction (an 8.05 s step typed as 8050) is named in a note;
    it stays in the fit, whose soft-L1 loss bounds its pull: its log residual ln 500 = 6.2 would
    drive a least-squares fit to the lower bound, here the value moves by under 5 % (0.718)."""
    base = load_stack("megatron-core")
    runs = [RL.Run(source=f"syn:{i}", model=m, hardware="h100-sxm",
                   layout=dict(gpus=g, tp=tp, pp=1, global_batch=gb, seq=8192, micro_batch=1, zero=1, recompute="none"))
            for i, (m, g, tp, gb) in enumerate([("llama-3-8b", 8, 1, 64), ("llama-3-8b", 16, 2, 128),
                                                ("llama-3-8b", 32, 2, 256)])]
    rs, groups = RL.prepare(runs)
    from llmpar.calibrate.runs_predict import predict
    pred = predict(rs, groups, base)
    t = [float(x) for x in pred.step_time_s]
    good = [dataclasses.replace(r, step_time_s=x) for r, x in zip(rs[:2], t[:2])]
    bad = dataclasses.replace(rs[2], step_time_s=t[2] * 500)
    assert 500 > FAR_OFF
    fit2 = R.fit_runs(good, base, parameters=["kernels.gemm_efficiency"], folds=0)
    fit3 = R.fit_runs(good + [bad], base, parameters=["kernels.gemm_efficiency"], folds=0)
    a2 = fit2.parameters["kernels.gemm_efficiency"]["after"]
    a3 = fit3.parameters["kernels.gemm_efficiency"]["after"]
    assert a2 == pytest.approx(0.7452, rel=1e-3)
    assert abs(a3 / a2 - 1) < 0.05
    assert any("syn:2" in n and "500x" in n and "check the unit" in n for n in fit3.notes)
    assert not any("syn:0" in n or "syn:1" in n for n in fit3.notes if "x off" in n)


def test_per_run_table_fits_80_and_120_columns_with_a_long_source():
    """A 58-character file name: the cell keeps its last 23 characters (the line number), the
    least needed columns go, and no line is wider than the console (newcomer review, item 13)."""
    from rich.console import Console

    from llmpar.cli.calibrate_runs_cmd import _runs_table

    row = {"source": "/x/a_very_long_file_name_for_the_runs_of_our_cluster_2026.csv:2", "model": "llama-3-8b",
           "layout": {"tp": 1, "pp": 1, "dp": 4, "cp": 2, "zero": 1, "micro_batch": 1},
           "chosen": {"recompute": "none", "recompute_layers": 0, "microbatches": 16},
           "measured_step_time_s": 8.05, "predicted_step_time_s_before": 7.25, "predicted_step_time_s_after": 7.25,
           "measured_memory_bytes": 60 * 2**30, "predicted_memory_bytes_after": 74.1 * 2**30}
    for width, gone in ((120, []), (80, ["before", "mem meas.", "model", "mem after"])):
        table, searched, dropped = _runs_table([row], width)
        con = Console(width=width, record=False)
        with con.capture() as cap:
            con.print(table)
        lines = cap.get().splitlines()
        assert max(len(ln.rstrip()) for ln in lines) <= width
        assert dropped == gone and searched
        assert any("_2026.csv:2" in ln for ln in lines)
        assert any("11.0 %" in ln for ln in lines)
