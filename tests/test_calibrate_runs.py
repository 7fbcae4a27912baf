"""`llmpar calibrate runs`: fitting a stack to measured runs (calibrate/runs.py).

The recovery test makes runs with a *known* stack (the truth), gives their step times to the fit
starting from the shipped base stack, and checks the fit finds the truth's parameters again."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from llmpar.calibrate import runs as R
from llmpar.calibrate import runs_layouts as RL
from llmpar.calibrate import runs_parameters as RP
from llmpar.calibrate import runs_predict as RPr
from llmpar.calibrate import runs_report as RR
from llmpar.specs import load_stack

LAYOUTS = [  # model, gpus, tp, pp, global batch, seq
    ("llama-3-8b", 8, 1, 1, 64, 8192), ("llama-3-8b", 16, 2, 1, 64, 8192), ("llama-3-8b", 8, 2, 2, 32, 4096),
    ("llama-3-70b", 64, 8, 2, 64, 8192), ("llama-3-70b", 64, 4, 4, 128, 4096), ("llama-2-7b", 8, 1, 1, 128, 4096),
]


def synthetic_runs(truth):
    runs = [RL.Run(source=f"syn:{i}", model=m, hardware="h100-sxm",
                  layout=dict(gpus=g, tp=tp, pp=pp, global_batch=gb, seq=s, micro_batch=1, zero=1, recompute="none"))
            for i, (m, g, tp, pp, gb, s) in enumerate(LAYOUTS)]
    rs, groups = RL.prepare(runs)
    pred = RPr.predict(rs, groups, truth)
    return [dataclasses.replace(r, step_time_s=float(t)) for r, t in zip(rs, pred.step_time_s)]


def test_fit_recovers_known_stack_parameters(monkeypatch):
    # truth: the default stack with a GEMM fraction of 0.62 on Hopper (shipped 0.73) and 8 ms per
    # micro-batch (shipped 0): both move every run's time in different proportions (GEMM-bound time
    # scales with 1/fraction, the fixed cost with m), so both are identifiable from 6 runs.
    base = load_stack("megatron-core")
    truth = RP.stack_with(base, {"kernels.gemm_efficiency": 0.62, "fixed.per_microbatch_s": 0.008}, "hopper")
    runs = synthetic_runs(truth)
    params = ["kernels.gemm_efficiency", "fixed.per_microbatch_s"]
    # without the prior the synthetic data are matched exactly (the solver lands within 1e-10 of
    # the truth; 1e-3 leaves room for any scipy/BLAS build)
    monkeypatch.setattr(R, "PRIOR_WEIGHT", 0.0)
    exact = R.fit_runs(runs, base, parameters=params, folds=0)
    assert exact.parameters["kernels.gemm_efficiency"]["after"] == pytest.approx(0.62, rel=1e-3)
    assert exact.parameters["fixed.per_microbatch_s"]["after"] == pytest.approx(0.008, rel=1e-3)
    assert exact.summary["after_in_sample"]["speed"]["max_abs"] < 1e-3
    # the base was clearly off: its GEMM fraction 0.7452 vs 0.62 changes GEMM-bound time by
    # 0.7452/0.62 - 1 = 20 %, and GEMMs dominate these dense steps (0.159 measured; > 0.10 bound)
    assert exact.summary["before"]["speed"]["median_abs"] > 0.10
    # with the shipped weak prior (PRIOR_WEIGHT 0.05) the small fixed cost is pulled towards its
    # base 0 but not past the truth: between 0 and 0.008 (0.00725 here; the bounds are those two
    # values, not a landing point); the fraction, which trades off against it, stays within 1 %
    # of the truth (0.6193 here: a lower fixed cost is made up by slightly slower GEMMs)
    monkeypatch.setattr(R, "PRIOR_WEIGHT", 0.05)
    fit = R.fit_runs(runs, base, parameters=params, folds=0)
    assert 0.615 < fit.parameters["kernels.gemm_efficiency"]["after"] < 0.63
    assert 0.004 < fit.parameters["fixed.per_microbatch_s"]["after"] < 0.008
    # the per-generation value is written for hopper only; ampere keeps the base's
    assert fit.fitted.kernels.gemm_efficiency["ampere"] == base.kernels.gemm_efficiency["ampere"]


def test_fit_recovers_the_zero1_weight_gather_overlap(monkeypatch):
    # truth: megatron-core with the ZeRO-1 weight all-gather only a quarter hidden
    # (overlap.param_gather 0.25; the shipped stack leaves it unset = overlap.dp 0.9791). The
    # synthetic runs are ZeRO-1 with dp > 1, so the exposed gather, (1 - f) x t_ag while t_ag < t_f,
    # moves their times linearly in f: the fit starts from the value the base runs with (0.9791)
    # and lands on the truth.
    base = load_stack("megatron-core")
    assert base.overlap.param_gather is None and RP.base_values(base, ["overlap.param_gather"], "hopper")[0] == \
        pytest.approx(base.overlap.dp)
    truth = RP.stack_with(base, {"overlap.param_gather": 0.25}, "hopper")
    runs = synthetic_runs(truth)
    monkeypatch.setattr(R, "PRIOR_WEIGHT", 0.0)
    fit = R.fit_runs(runs, base, parameters=["overlap.param_gather"], folds=0)
    assert fit.parameters["overlap.param_gather"]["before"] == pytest.approx(base.overlap.dp)
    assert fit.parameters["overlap.param_gather"]["after"] == pytest.approx(0.25, abs=1e-3)
    assert fit.fitted.overlap.param_gather == pytest.approx(0.25, abs=1e-3)


def test_fit_is_deterministic():
    base = load_stack("megatron-core")
    truth = RP.stack_with(base, {"kernels.gemm_efficiency": 0.7}, "hopper")
    runs = synthetic_runs(truth)
    a = R.fit_runs(runs, base, parameters=["kernels.gemm_efficiency"], folds=0)
    b = R.fit_runs(runs, base, parameters=["kernels.gemm_efficiency"], folds=0)
    assert a.parameters == b.parameters
    # --folds 0 means no cross-validation (it used to run 2 folds anyway); 3 folds run 3
    assert a.summary["folds"] == 0 and "after_cross_validated" not in a.summary
    c = R.fit_runs(runs, base, parameters=["kernels.gemm_efficiency"], folds=3)
    # LAYOUTS hold 4 configurations (model x GPUs: llama-3-8b x 8, x 16; llama-3-70b x 64; llama-2-7b
    # x 8), so 3 folds are possible and run
    assert len(set(RR.configurations(c.runs))) == 4
    assert c.summary["folds"] == 3 and "after_cross_validated" in c.summary


def test_regret_by_hand():
    # one configuration (llama-3-8b x 8) with three measured layouts taking 10, 12 and 11 s;
    # llmpar predicts 5, 4, 6 s: it ranks the second first, whose measured 12 s is 20 % slower
    # than the best measured 10 s -> regret 0.2. A configuration with one run is not counted.
    runs = [RL.Run(source=str(i), model="llama-3-8b", hardware="h100-sxm", layout={"gpus": 8}) for i in range(3)]
    runs.append(RL.Run(source="3", model="llama-3-8b", hardware="h100-sxm", layout={"gpus": 16}))
    out = RR.regret(runs, np.array([5.0, 4.0, 6.0, 1.0]), np.array([10.0, 12.0, 11.0, 3.0]), np.ones(4, bool))
    assert out["configurations"] == 1
    assert out["median"] == pytest.approx(0.2)
    assert out["within_5pct"] == 0.0


def test_regret_compares_time_per_token():
    # layouts of one configuration that step different batches (the playbook's 1B on 32 GPUs has
    # one at 128 sequences among runs of 256) are ranked and compared per token:
    #   A: 2 units of tokens, measured 10 s (5 s/unit), predicted 5 s (2.5)
    #   B: 1 unit,            measured  9 s (9 s/unit), predicted 4 s (4)
    #   C: 2 units,           measured 11 s (5.5),      predicted 4.5 s (2.25)
    # llmpar ranks C first (2.25 s/unit); the best measured is A (5 s/unit): regret 5.5/5 - 1 = 0.1.
    # By step time, B (shortest predicted and measured step) would be both pick and best: 0, wrong.
    runs = [RL.Run(source=str(i), model="llama-3-8b", hardware="h100-sxm", layout={"gpus": 8}) for i in range(3)]
    pred, meas, tok = np.array([5.0, 4.0, 4.5]), np.array([10.0, 9.0, 11.0]), np.array([2.0, 1.0, 2.0])
    assert RR.regret(runs, pred, meas, np.ones(3, bool), tok)["median"] == pytest.approx(0.1)
    assert RR.regret(runs, pred, meas, np.ones(3, bool))["median"] == pytest.approx(0.0)


def test_measured_time_from_each_figure():
    # one llama-3-8b run on 8 GPUs, global batch 64 x 8192 tokens = 524,288 tokens per step:
    # 1,000 tokens/s per GPU -> 524,288 / 8,000 = 65.536 s; an MFU of 0.4 against the bf16 peak
    # 989e12 -> t = model FLOPs / (0.4 x 989e12 x 8).
    base = dict(source="x", model="llama-3-8b", hardware="h100-sxm",
                layout=dict(gpus=8, tp=1, pp=1, global_batch=64, seq=8192, micro_batch=1))
    runs = [RL.Run(**base, tokens_per_s_per_gpu=1000.0), RL.Run(**base, mfu=0.4)]
    rs, groups = RL.prepare(runs)
    pred = RPr.predict(rs, groups, load_stack())
    t = RPr.measured_step_time(rs, pred)
    assert t[0] == pytest.approx(524_288 / 8_000)
    assert t[1] == pytest.approx(pred.model_flops[1] / (0.4 * 989e12 * 8))


def test_cli_fit_writes_a_stack_that_reproduces_the_fit(cli, tmp_path):
    base = load_stack("megatron-core")
    truth = RP.stack_with(base, {"kernels.gemm_efficiency": 0.7}, "hopper")
    runs = synthetic_runs(truth)
    table = tmp_path / "runs.yaml"
    table.write_text(yaml.safe_dump({"hardware": "h100-sxm", "runs": [
        {"model": r.model, **r.layout, "step_time_s": r.step_time_s} for r in runs]}))
    out = tmp_path / "mine.yaml"
    res = cli("calibrate", "runs", str(table), "--stack", "megatron-core", "--fit", "kernels.gemm_efficiency",
              "--folds", "0", "--out", str(out), "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["parameters"]["kernels.gemm_efficiency"]["after"] == pytest.approx(0.7, rel=0.01)
    written = yaml.safe_load(out.read_text())
    assert written["extends"] == "megatron-core" and written["calibration"]["files"] == [str(table)]
    mine = load_stack(str(out))
    assert mine.value("kernels.gemm_efficiency", "hopper") == pytest.approx(0.7, rel=0.01)
    # the written stack runs: llmpar step with it gives the fitted prediction for the first run
    r0 = runs[0]
    step = cli("step", r0.model, "--stack", str(out), "--gpus", "8", "--global-batch", "64", "--seq", "8192", "--zero", "1",
               "--json")
    assert step.code == 0, step.err
    assert step.json()["step_time_s"] == pytest.approx(r0.step_time_s, rel=0.01)
    assert step.json()["settings"]["stack"] == "mine"


def test_cli_check_tolerance_exit_codes(cli, tmp_path):
    # a run measured at exactly the base stack's prediction: error 0 -> exit 0 at 1 %;
    # the same run measured 30 % slower: exit 1 at 10 %.
    base = load_stack("megatron-core")
    r0 = synthetic_runs(base)[0]
    for factor, tol, code in ((1.0, "1%", 0), (1.3, "10%", 1)):
        table = tmp_path / f"r{factor}.yaml"
        table.write_text(yaml.safe_dump({"hardware": "h100-sxm", "runs": [
            {"model": r0.model, **r0.layout, "step_time_s": r0.step_time_s * factor}]}))
        res = cli("calibrate", "runs", str(table), "--check", "--tolerance", tol)
        assert res.code == code, (factor, res.err)


@pytest.mark.parametrize("body, needle", [
    ({"runs": [{"model": "llama-3-8b", "gpus": 8, "global_batch": 64, "seq": 8192, "step_time_s": 1.0}]},
     "hardware"),
    ({"hardware": "h100-sxm", "runs": [{"model": "llama-3-8b", "gpus": 12, "tp": 8, "global_batch": 64,
                                        "seq": 8192, "step_time_s": 1.0}]}, "divisible"),
    ({"hardware": "h100-sxm", "runs": [{"model": "no-such-model", "gpus": 8, "global_batch": 64, "seq": 8192,
                                        "step_time_s": 1.0}]}, "no-such-model"),
    # DualPipe needs an even pp and an even m >= 2p (cost/pipeline.py schedule_feasible, the rule
    # the planner uses): pp 4, dp 2, global batch 10: only b = 1 divides it (b in 1, 2, 4, 8, 16), m = 5, odd
    ({"hardware": "h100-sxm", "runs": [{"model": "llama-3-8b", "gpus": 8, "pp": 4, "global_batch": 10,
                                        "seq": 8192, "schedule": "dualpipe", "step_time_s": 1.0}]},
     "dualpipe with pp=4"),
    # recompute_layers (Megatron-Core --recompute-num-layers) needs full recompute and at most a
    # chunk's layers: Llama-3-8B has 32 layers, pp 4 -> 8 per stage
    ({"hardware": "h100-sxm", "runs": [{"model": "llama-3-8b", "gpus": 8, "pp": 4, "global_batch": 64, "seq": 8192,
                                        "recompute": "full", "recompute_layers": 9, "step_time_s": 1.0}]},
     "exceeds the 8 layers"),
    ({"hardware": "h100-sxm", "runs": [{"model": "llama-3-8b", "gpus": 8, "global_batch": 64, "seq": 8192,
                                        "recompute": "selective", "recompute_layers": 2, "step_time_s": 1.0}]},
     "needs recompute: full"),
    ({"hardware": "h100-sxm", "runs": [{"model": "llama-3-8b", "gpus": 8, "seq": 8192, "step_time_s": 1.0}]},
     "global_batch"),
])
def test_cli_bad_runs_are_one_line_exit_2(cli, tmp_path, body, needle):
    table = tmp_path / "bad.yaml"
    table.write_text(yaml.safe_dump(body))
    res = cli("calibrate", "runs", str(table), "--check")
    assert res.code == 2
    assert needle in res.err and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1


def test_cli_unknown_stack_and_parameter(cli, tmp_path):
    table = tmp_path / "ok.yaml"
    table.write_text(yaml.safe_dump({"hardware": "h100-sxm", "runs": [
        {"model": "llama-3-8b", "gpus": 8, "global_batch": 64, "seq": 8192, "step_time_s": 9.0}]}))
    res = cli("calibrate", "runs", str(table), "--stack", "nope")
    assert res.code == 2 and "unknown stack 'nope'" in res.err
    res = cli("calibrate", "runs", str(table), "--fit", "kernels.warp_speed")
    assert res.code == 2 and "cannot fit kernels.warp_speed" in res.err


def test_a_layout_that_breaks_a_rule_is_predicted_not_to_run():
    # pp = 32 on the 32-layer llama-3-8b is allowed (one layer per stage), pp = 64 is not: llmpar's
    # layout rules (layout.layout_violations: pp <= layers) say it cannot run, so its verdict
    # is "does not run" and an OOM/crashed status agrees with it (the playbook's 93 crashed runs
    # with pp > layers)
    runs = [RL.Run(source=str(pp), model="llama-3-8b", hardware="h100-sxm", status="oom",
                  layout=dict(gpus=pp, tp=1, pp=pp, dp=1, zero=1, recompute="full", global_batch=pp, seq=4096,
                              micro_batch=1))
            for pp in (32, 64)]
    rs, groups = RL.prepare(runs)
    pred = RPr.predict(rs, groups, load_stack())
    assert pred.fits[0] and not pred.fits[1]


def test_logs_take_their_layout_from_the_command_line_and_their_stack_from_the_framework(cli):
    # a torchtitan log prints no layout: --layout gives it; the log's framework names the base
    # stack (torchtitan). Without --layout it is one line naming the log and what is missing.
    log = "tests/fixtures/train_logs/torchtitan_pr1287_llama3_8b.log"
    res = cli("calibrate", "runs", log, "--model", "llama-3-8b", "--hardware", "h100-sxm", "--check")
    assert res.code == 2 and "no layout" in res.err and "torchtitan_pr1287" in res.err
    res = cli("calibrate", "runs", log, "--model", "llama-3-8b", "--hardware", "h100-sxm",
              "--layout", "gpus=8,seq=8192,global_batch=8", "--check", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["stack"] == "torchtitan"
    assert d["rows"][0]["layout"]["gpus"] == 8 and d["rows"][0]["measured_step_time_s"] > 0
    res = cli("calibrate", "runs", log, "--layout", "gpus8", "--check")
    assert res.code == 2 and "--layout expects KEY=VALUE" in res.err


def test_a_run_without_a_schedule_runs_one_its_stack_implements():
    # Llama-3-8B (32 layers) at pp 4: 8 layers per stage. A run that states no schedule is searched
    # over 1F1B and interleaved with v in {2, 4, 8} when the stack has interleaved (megatron-core),
    # but only 1F1B under nanotron (no interleaved engine: stacks/nanotron.yaml schedules)
    from llmpar.parallel import SCHEDULES
    from llmpar.specs import load_model

    run = RL.Run(source="t:1", model="llama-3-8b", hardware="h100-sxm",
                layout={"gpus": 8, "tp": 1, "pp": 4, "dp": 2, "seq": 4096, "global_batch": 64, "micro_batch": 1,
                        "recompute": "none", "zero": 1})
    model = load_model("llama-3-8b")
    pairs = lambda stack: sorted({(SCHEDULES[c["schedule"]], c["virtual_stages"])
                                  for c in RL.layout_candidates(run, model, schedules=load_stack(stack).schedules)})
    assert pairs("megatron-core") == [("1f1b", 1), ("interleaved", 2), ("interleaved", 4), ("interleaved", 8)]
    assert pairs("nanotron") == [("1f1b", 1)]
    # a stated schedule is evaluated as stated, whatever the stack
    stated = dataclasses.replace(run, layout={**run.layout, "schedule": "interleaved", "virtual_stages": 2})
    assert {(c["schedule"], c["virtual_stages"]) for c in RL.layout_candidates(stated, model, schedules=("1f1b",))} \
        == {(SCHEDULES.index("interleaved"), 2)}


def test_memory_stage_first_compares_with_stage_0():
    # A PP run whose peak is world rank 0's (nanotron's benchmark CSV) is compared with llmpar's
    # pipeline stage 0, not the most-loaded stage; the FITS verdict still takes the most-loaded.
    # Llama-3-8B, pp 4, 1F1B, 8 micro-batches: stage 0 holds 4 in flight and is the most loaded;
    # at pp 2 with one micro-batch of 2 each stage holds 1 and the last one adds the 128K-vocabulary
    # logits, so the last is. memory_per_stage gives each stage's figures from the hand-checked
    # terms (tests/test_memory*.py); memory_per_gpu's first_stage_* must be stage 0's.
    import numpy as np

    from llmpar import api
    from llmpar.calibrate.runs_layouts import prepare
    from llmpar.calibrate.runs_predict import comparable_peak, predict
    from llmpar.calibrate.runs_record import MeasuredRun
    from llmpar.cost.memory import memory_per_gpu, memory_per_stage
    from llmpar.parallel import Parallel
    from llmpar.specs import load_hardware, load_stack

    model, hw = api.load_model_spec("llama-3-8b", None)[0], load_hardware("h100-sxm")
    settings = api.make_settings(model)
    par = Parallel(pp=4, dp=2, micro_batch=1, microbatches=8, seq=8192)
    stages = memory_per_stage(model, hw, par, settings)
    m = memory_per_gpu(model, hw, par, settings)
    assert m["first_stage_reserved_bytes"] == pytest.approx(stages[0]["reserved_bytes"], rel=1e-12)
    assert m["first_stage_allocated_bytes"] == pytest.approx(stages[0]["allocated_bytes"], rel=1e-12)
    assert m["reserved_bytes"] == pytest.approx(max(s["reserved_bytes"] for s in stages), rel=1e-12)
    lay = {"gpus": 8, "pp": 2, "micro_batch": 2, "microbatches": 1, "seq": 8192, "recompute": "none",
           "zero": 1, "sp": False, "schedule": "1f1b"}
    runs = [MeasuredRun(source=f"t:{i}", model="llama-3-8b", hardware="h100-sxm", layout=lay,
                        peak_reserved_bytes=40 * 2**30, memory_stage=stage) for i, stage in enumerate(("max", "first"))]
    stk = load_stack("megatron-core")
    runs, groups = prepare(runs, zero_stages=stk.zero_stages, schedules=stk.schedules)
    pred = predict(runs, groups, stk)
    peak = comparable_peak(runs, pred)
    settings1 = api.make_settings(model)
    par1 = Parallel(pp=2, dp=4, micro_batch=2, microbatches=1, seq=8192, zero=1)
    s1 = memory_per_stage(model, hw, par1, settings1)
    assert peak[0] == pytest.approx(max(s["reserved_bytes"] for s in s1), rel=1e-12)
    assert peak[1] == pytest.approx(s1[0]["reserved_bytes"], rel=1e-12)
    assert peak[1] < peak[0]      # 74.9 GB on stage 0 against 92.4 GB on the last stage
    assert bool(pred.fits[0]) == bool(pred.fits[1])     # the verdict does not depend on whose peak was logged
    assert np.all(np.isfinite(peak)) and pred.pick[0]["schedule"] == "1f1b"


def test_a_run_states_its_optimizer_and_gradient_dtype():
    # optimizer and grad_dtype are runs columns as --optimizer and --grad-dtype are options: the
    # same layout with adam (fp32 master + m + v = 12 B/param, ZeRO §3.1) and with adam-8bit
    # (fp32 master 4 + 8-bit m, v 2 = 6 B/param) differs, at ZeRO-0, by 6 B x the parameters on
    # each GPU before the allocator's overhead; bf16 gradients instead of the stack's fp32 main
    # gradients take 2 B/param off. Llama-3-8B on one GPU: 8,030,261,248 parameters.
    from llmpar.calibrate.runs_layouts import prepare
    from llmpar.calibrate.runs_predict import predict
    from llmpar.calibrate.runs_record import MeasuredRun
    from llmpar.specs import load_stack

    lay = {"gpus": 8, "tp": 1, "pp": 1, "zero": 0, "micro_batch": 1, "microbatches": 1, "seq": 4096,
           "recompute": "full", "sp": False}
    extra = [{}, {"optimizer": "adam-8bit"}, {"grad_dtype": "bf16"}]
    runs = [MeasuredRun(source=f"t:{i}", model="llama-3-8b", hardware="h100-sxm", layout={**lay, **x},
                        step_time_s=1.0) for i, x in enumerate(extra)]
    stk = load_stack("megatron-core")
    runs, groups = prepare(runs, zero_stages=stk.zero_stages, schedules=stk.schedules)
    assert sorted(sorted(g.settings.items()) for g in groups) == [[], [("grad_dtype", "bf16")],
                                                                 [("optimizer", "adam-8bit")]]
    pred = predict(runs, groups, stk)
    n, over = 8_030_261_248, 1 + stk.memory.allocator_overhead
    assert pred.reserved_bytes[0] - pred.reserved_bytes[1] == pytest.approx(6 * n * over, rel=1e-9)
    assert pred.reserved_bytes[0] - pred.reserved_bytes[2] == pytest.approx(2 * n * over, rel=1e-9)


def test_a_run_states_its_overlaps_and_dispatcher():
    # tp_overlap, dp_overlap, ep_overlap and ep_dispatcher are runs columns as the CLI's options are:
    # a run stating ep_overlap 1 (Megatron-Core --overlap-moe-expert-parallel-comm) is predicted as
    # `llmpar step --ep-overlap 1` is, and differs from the same layout without it
    from llmpar import api
    from llmpar.calibrate.runs_layouts import prepare
    from llmpar.calibrate.runs_predict import predict
    from llmpar.calibrate.runs_record import MeasuredRun
    from llmpar.specs import load_stack

    lay = {"gpus": 8, "tp": 1, "pp": 1, "ep": 8, "zero": 1, "micro_batch": 1, "global_batch": 64, "seq": 4096,
           "recompute": "none", "sp": False}
    runs = [MeasuredRun(source=f"t:{i}", model="mixtral-8x7b", hardware="h100-sxm", layout={**lay, **x},
                        step_time_s=1.0) for i, x in enumerate(({}, {"ep_overlap": 1.0, "ep_dispatcher": "deepep"}))]
    stk = load_stack("megatron-core")
    runs, groups = prepare(runs, zero_stages=stk.zero_stages, schedules=stk.schedules)
    pred = predict(runs, groups, stk)
    kw = dict(hardware="h100-sxm", gpus=8, ep=8, zero=1, micro_batch=1, global_batch=64, seq=4096, recompute="none")
    assert pred.step_time_s[0] == pytest.approx(api.step("mixtral-8x7b", **kw).step_time_s, rel=1e-12)
    stated = api.step("mixtral-8x7b", ep_overlap=1.0, ep_dispatcher="deepep", **kw).step_time_s
    assert pred.step_time_s[1] == pytest.approx(stated, rel=1e-12) and pred.step_time_s[1] != pred.step_time_s[0]


def test_cli_only_keeps_one_profiles_runs(cli, tmp_path):
    # a table mixing an A100 and an H100 run cannot be calibrated as one (two GPU generations); --only
    # hardware=h100-sxm keeps the H100 run, and --check then reports exactly that one run; a selector
    # that matches nothing, or an unknown key, is one line and exit 2
    base = load_stack("megatron-core")
    r0 = synthetic_runs(base)[0]
    row = {"model": r0.model, **r0.layout, "step_time_s": r0.step_time_s}
    table = tmp_path / "mixed.yaml"
    table.write_text(yaml.safe_dump({"runs": [{**row, "hardware": "h100-sxm"}, {**row, "hardware": "a100-80gb"}]}))
    res = cli("calibrate", "runs", str(table), "--check")
    assert res.code == 2 and "--only hardware=NAME" in res.err
    res = cli("calibrate", "runs", str(table), "--check", "--only", "hardware=h100-sxm", "--json")
    assert res.code == 0, res.err
    assert res.json()["summary"]["before"]["speed"]["runs"] == 1
    res = cli("calibrate", "runs", str(table), "--check", "--only", "hardware=b200")
    assert res.code == 2 and "selects none of the 2 runs" in res.err and len(res.err.strip().splitlines()) == 1
    res = cli("calibrate", "runs", str(table), "--check", "--only", "color=red")
    assert res.code == 2 and "expected hardware=NAME" in res.err and len(res.err.strip().splitlines()) == 1
