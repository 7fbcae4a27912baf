"""`--plot FILE.png|svg` (issue 10, "Plots and the terminal").

Each figure is checked through the matplotlib objects the plot function returns (titles, axis
labels, number of series, bars and lines, legend entries) — never pixels — and each command is run
once to check it writes a valid PNG or SVG. Also: a missing matplotlib is one line and exit 2.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import yaml

pytest.importorskip("matplotlib")

from llmpar.cli import plots  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _legend(ax) -> list[str]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg is not None else []


def _is_png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


def _is_svg(path) -> bool:
    return path.is_file() and b"<svg" in path.read_bytes()[:2000]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


# ---------------------------------------------------------------------------------------- plan

def test_plan_figure_has_every_feasible_point_the_frontier_and_the_winner():
    from llmpar.planner.search import plan

    r = plan("llama-3-8b", gpus=8, top=3, keep_points=True)
    fig = plots.plan_figure(r)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "memory per GPU (GB)" and ax.get_ylabel() == "step time (s)"
    assert "llama-3-8b" in ax.get_title() and f"{r.space.feasible:,} feasible" in ax.get_title()
    # one scatter per colour group + #1; together the groups hold every feasible layout exactly once
    groups = ax.collections[:-1]
    assert sum(len(c.get_offsets()) for c in groups) == r.space.feasible
    labels = _legend(ax)
    assert "#1" in labels and any(x.startswith("frontier (") for x in labels)
    assert any(x.startswith("tp=") for x in labels) or any(x in ("1f1b", "interleaved", "no pipeline") for x in labels)
    # #1 is drawn at plan #1's numbers
    star = ax.collections[-1].get_offsets()[0]
    assert star[0] == pytest.approx(r.best.memory_bytes / 1e9) and star[1] == pytest.approx(r.best.step_time_s)
    # the frontier line (steps) ends at the fastest layout: #1 by time
    frontier = [ln for ln in ax.get_lines() if ln.get_label().startswith("frontier")][0]
    n_front = int(np.count_nonzero(r.points["frontier"]))
    assert len(frontier.get_xdata()) == n_front
    # the frontier starts at the fastest layout; #1 is the recommended one, within the planner's rank
    # tolerance of it (docs/planner.md, Ranking under uncertainty)
    assert min(frontier.get_ydata()) == pytest.approx(float(np.min(r.points["step_time_s"])))
    assert r.best.step_time_s <= min(frontier.get_ydata()) * (1 + r.space.rank_tolerance) + 1e-12


def test_plan_cli_writes_png_and_keeps_json_clean(cli, tmp_path):
    out = tmp_path / "plan.png"
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--top", "3", "--plot", out)
    assert res.code == 0, res.err
    assert _is_png(out) and f"plot: {out}" in res.out
    out2 = tmp_path / "plan.svg"
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--top", "3", "--plot", out2, "--json")
    assert res.code == 0 and _is_svg(out2)
    res.json()   # stdout is the JSON object alone


def test_plot_suffix_and_missing_matplotlib_are_one_line_exit_2(cli, tmp_path, monkeypatch):
    from conftest import assert_one_line_error

    assert_one_line_error(cli("plan", "--gpus", "8", "--plot", tmp_path / "x.pdf"), ".png or .svg")
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    for args in (("plan", "--gpus", "8"), ("bubble", "--pp", "2", "-m", "4"), ("memory", "llama-3-8b")):
        res = cli(*args, "--plot", tmp_path / "x.png")
        assert_one_line_error(res, "pip install 'llmpar[plot]'")
        assert not (tmp_path / "x.png").exists()


# --------------------------------------------------------------------------------------- sweep

def test_sweep_figure_one_line_per_hardware_per_panel(cli, tmp_path):
    from llmpar.planner.sweep import sweep

    r = sweep("llama-3-8b", gpus="8,16,32", hardware="h100-sxm,a100-80gb", tokens="1T")
    fig = plots.sweep_figure(r)
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == ["tokens/s", "MFU (%)",
                                                "days to train (with failures and checkpoints)"]
    for ax in axes:
        assert ax.get_xlabel() == "GPUs"
        assert _legend(ax) == ["h100-sxm", "a100-80gb"]
        assert len(ax.get_lines()) == 2
        for line in ax.get_lines():
            assert list(line.get_xdata()) == [8, 16, 32]
    h100 = [row for row in r.rows if row.hardware == "h100-sxm"]
    assert list(axes[0].get_lines()[0].get_ydata()) == pytest.approx([row.plan.tokens_per_s for row in h100])
    assert "llama-3-8b" in fig._suptitle.get_text()
    # the days plotted are the table's eff. days (goodput)
    assert list(axes[2].get_lines()[0].get_ydata()) == pytest.approx(
        [row.training["goodput"]["effective_days"] for row in h100])
    # the swept counts are the ticks, written as counts (not 2^3)
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["8", "16", "32"]
    # without --tokens: no days panel; with a price: a cost panel
    assert len(plots.sweep_figure(sweep("llama-3-8b", gpus="8,16")).axes) == 2
    priced = plots.sweep_figure(sweep("llama-3-8b", gpus="8,16", tokens="1T", gpu_hour_price=2.0))
    assert priced.axes[3].get_title() == "cost to train vs GPUs"
    out = tmp_path / "sweep.png"
    res = cli("sweep", "llama-3-8b", "--gpus", "8,16", "--plot", out)
    assert res.code == 0, res.err
    assert _is_png(out)


# -------------------------------------------------------------------------------------- memory

def test_memory_figure_stacked_bars_per_stage_against_hbm(cli, tmp_path):
    from llmpar import api

    r = api.memory("llama-3-70b", tp=8, pp=4, gpus=64, per_stage=True)
    fig = plots.memory_figure(r)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "pipeline stage" and ax.get_ylabel() == "memory per GPU (GB)"
    assert "llama-3-70b" in ax.get_title() and "pp=4" in ax.get_title()
    labels = _legend(ax)
    assert labels[0].startswith("HBM ") and labels[1:] == list(plots.STAGE_PARTS)
    # 7 parts x 4 stages bars; each stage's stack reaches the stage's total
    assert len(ax.patches) == len(plots.STAGE_PARTS) * 4
    for i, s in enumerate(r.stages):
        bars = [c.patches[i] for c in ax.containers]
        top = bars[-1].get_y() + bars[-1].get_height()
        assert top == pytest.approx(s["total_bytes"] / 1e9, rel=1e-9)
    hbm = [ln for ln in ax.get_lines() if ln.get_label().startswith("HBM")][0]
    assert hbm.get_ydata()[0] == pytest.approx(r.capacity_bytes / 1e9)
    out = tmp_path / "mem.svg"
    res = cli("memory", "llama-3-70b", "--tp", "8", "--pp", "4", "--gpus", "64", "--plot", out, "--units", "gib")
    assert res.code == 0, res.err
    assert _is_svg(out) and "Per pipeline stage" in res.out   # --plot implies --per-stage


# -------------------------------------------------------------------------------------- bubble

def test_bubble_figure_is_the_simulated_gantt_chart(cli, tmp_path):
    from llmpar.cli.bubble_cmd import build

    result = build("1f1b", 4, 8, None, None)
    fig = plots.bubble_figure(result)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"stage {i}" for i in (3, 2, 1, 0)]
    assert _legend(ax) == ["idle", "forward", "backward"]
    assert "1f1b" in ax.get_title() and "p=4, m=8" in ax.get_title()
    # per stage: one idle background + one forward + one backward collection, each slot a bar
    assert len(ax.collections) == 4 * 3
    fwd = [c for c in ax.collections if c.get_label() == "forward"]
    assert len(fwd[0].get_paths()) == 8   # stage 0 runs the 8 micro-batches' forwards
    assert ax.get_xlim()[1] == pytest.approx(result["timeline"]["total_units"])
    out = tmp_path / "bubble.png"
    res = cli("bubble", "--pp", "4", "-m", "8", "--schedule", "zb-h1", "--plot", out)
    assert res.code == 0, res.err
    assert _is_png(out)
    # DualPipe is simulated too (the DualPipe repository's order): one row per device
    d = plots.bubble_figure(build("dualpipe", 4, 8, None, None))
    assert [t.get_text() for t in d.axes[0].get_yticklabels()] == [f"device {i}" for i in (3, 2, 1, 0)]
    # a schedule too large to simulate has no chart: one line, exit 2
    res = cli("bubble", "--pp", "128", "-m", "256", "--plot", tmp_path / "d.png")
    assert res.code == 2 and "not simulated" in res.err


# ----------------------------------------------------------------------------------- calibrate

def test_calibrate_runs_figure_before_after_and_identity(cli, tmp_path):
    from llmpar.calibrate import runs as R
    from llmpar.calibrate import runs_parameters as RP
    from llmpar.specs import load_stack
    from test_calibrate_runs import synthetic_runs

    truth = RP.stack_with(load_stack("megatron-core"), {"kernels.gemm_efficiency": 0.7}, "hopper")
    runs = synthetic_runs(truth)
    table = tmp_path / "runs.yaml"
    table.write_text(yaml.safe_dump({"hardware": "h100-sxm", "runs": [
        {"model": r.model, **r.layout, "step_time_s": r.step_time_s} for r in runs]}))
    result = R.fit_runs(runs, "megatron-core", parameters=["kernels.gemm_efficiency"], folds=0)
    fig = plots.calibrate_runs_figure(result)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "measured step time (s)" and ax.get_ylabel() == "predicted step time (s)"
    assert _legend(ax) == ["megatron-core (before)", "fitted (after)", "y = x"]
    assert len(ax.collections) == 2 and all(len(c.get_offsets()) == len(runs) for c in ax.collections)
    ident = ax.get_lines()[0]
    assert list(ident.get_xdata()) == list(ident.get_ydata())
    out = tmp_path / "runs.png"
    res = cli("calibrate", "runs", table, "--fit", "kernels.gemm_efficiency", "--folds", "0", "--plot", out)
    assert res.code == 0, res.err
    assert _is_png(out)


def test_calibrate_check_figure_is_drawn_by_plots(cli, tmp_path):
    from _synthetic_nccl import SWEEP, TRUTH_YAML, write_log
    from llmpar.cost.collectives import collective_time
    from llmpar.specs import load_hardware

    (tmp_path / "truth.yaml").write_text(TRUTH_YAML)
    truth = load_hardware(str(tmp_path / "truth.yaml"))
    S = np.array(SWEEP)
    log = write_log(tmp_path / "slow.txt", "all_reduce", 8, 1, S, 1.25 * collective_time(truth, "all_reduce", S, 8, 8))
    out = tmp_path / "check.svg"
    res = cli("calibrate", "check", log, "--hardware", tmp_path / "truth.yaml", "--tolerance", "25%", "--plot", out)
    assert res.code == 0, res.err
    assert _is_svg(out)
    from llmpar.calibrate import check as C
    from llmpar.cli.calibrate_fit_cmd import _parse_logs

    parsed = _parse_logs((str(log),), None, None, None, None)
    fig = plots.calibrate_check_figure(C.check(parsed, str(tmp_path / "truth.yaml"), tolerance=0.25))
    ax = fig.axes[0]
    assert ax.get_ylabel() == "busbw (GB/s)" and _legend(ax) == ["slow.txt measured", "slow.txt predicted"]


def test_serve_frontier_figure(cli, tmp_path):
    """serve-plan --plot: every candidate's points, the frontier line, #1 starred at its own figures."""
    import llmpar

    r = llmpar.serve_plan("llama-3-8b", gpus=2, tpot="20ms")
    fig = plots.serve_frontier_figure(r)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "output tokens/s per user (1 / TPOT)" and ax.get_ylabel() == "output tokens/s per GPU"
    b = r["candidates"][0]
    star = ax.collections[-1].get_offsets()[0]
    assert list(star) == pytest.approx([1.0 / b.tpot_s, b.output_tokens_per_s / b.gpus])
    out = tmp_path / "frontier.svg"
    res = cli("serve-plan", "llama-3-8b", "--gpus", "2", "--plot", out)
    assert res.code == 0, res.err
    assert "<svg" in out.read_text()
