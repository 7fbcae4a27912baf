"""Bad input found by the 2026-12-01 adversarial sweep of the CLI (commands other than
`calibrate runs`, and not the Python API: tests/test_bad_input_runs.py, test_bad_input_api.py):
each ends in one line on stderr and exit 2, with the reason it is refused."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error


@pytest.mark.parametrize("args, needle", [
    # a token budget below one step (llama-3-8b on 8 GPUs at the plan/step default batch of
    # 4,194,304 tokens = 512 sequences of 8,192) printed "1 steps" beside 4.6e-08 GPU-hours
    (["step", "llama-3-8b", "--gpus", "8", "--tokens", "1.5"], "less than one step's 4,194,304 tokens"),
    (["sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "100"], "less than one step's"),
    # the layout rule memory/step apply (v equal chunks per stage): 12 layers / pp 4 = 3 per stage
    (["bubble", "--pp", "4", "-m", "8", "--virtual-stages", "2", "--layers", "12"],
     "--virtual-stages 2 does not divide the 3 layers per pipeline stage"),
    # as --gpus: a trailing comma is a typo, not a list of one
    (["sweep", "llama-3-8b", "--gpus", "8,16", "--hardware", "h100-sxm,"], "empty entry between commas"),
    # 1e400 overflows to inf: not "must be positive"
    (["step", "llama-3-8b", "--gpus", "8", "--tokens", "1e400"], "finite"),
    (["collective", "all-reduce", "--size", "1e400", "--gpus", "8"], "finite"),
])
def test_cli_bad_values(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_bubble_v_that_divides_is_fine(cli):
    # 12 layers / pp 4 = 3 per stage: v = 3 splits each stage into 3 chunks of 1 layer
    assert cli("bubble", "--pp", "4", "-m", "8", "--virtual-stages", "3", "--layers", "12").code == 0


def test_spec_errors_name_the_field_not_pydantic_internals(cli, tmp_path):
    # kernels.gemm_efficiency is a number or a per-generation mapping (a union): pydantic reports
    # it as 'kernels.gemm_efficiency.constrained-float' and once more for the mapping member;
    # the user wrote 'kernels.gemm_efficiency', one field
    p = tmp_path / "s.yaml"
    p.write_text("name: bad\nextends: megatron-core\nkernels:\n  gemm_efficiency: -1\n")
    res = cli("stacks", "show", p)
    # the share's own check (specs/stack.py _check_shares) names the value and the range [1e-3, 1]
    assert_one_line_error(res, "field 'kernels.gemm_efficiency': -1 is not a share between 0.001 and 1")
    assert "constrained" not in res.err and "more" not in res.err
    # a mapping where a block belongs: no "instance of MoESpec"
    m = tmp_path / "m.yaml"
    m.write_text("name: m\nfamily: llama\nlayers: 2\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 100\n"
                 "max_seq: 128\nmoe: 5\n")
    res = cli("memory", m)
    assert_one_line_error(res, "field 'moe'")
    assert "instance of" not in res.err


def test_calibrate_fit_out_needs_its_folder(cli, tmp_path):
    # every --out writes into an existing folder; `calibrate fit` used to create missing ones
    from conftest import REPO

    logs = sorted((REPO / "tests" / "fixtures" / "nccl").glob("*.txt"))[:1]
    res = cli("calibrate", "fit", *logs, "--out", tmp_path / "no" / "such" / "x.yaml")
    assert_one_line_error(res, "x.yaml")
    assert not (tmp_path / "no").exists()


def test_calibrate_gemm_json_without_a_gpu_is_a_document(cli):
    # no CUDA device here: exit 0 (nothing measured is not bad input), the reason on stderr, and
    # with --json a JSON document on stdout saying so (it used to print nothing)
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():   # skip before measuring: a GPU here would time real GEMMs first
            pytest.skip("a CUDA GPU is present")
    res = cli("calibrate", "gemm", "--device", "cuda", "--json")
    assert res.code == 0
    doc = res.json()
    assert doc["measured"] is False and doc["samples"] == [] and doc["planned"] and "GPU" in doc["reason"]


@pytest.mark.parametrize("args, needle", [
    (["memory", "llama-3-8b", "--hardware", "{tmp}"], "is a folder, not a YAML file"),
    (["memory", "llama-3-8b", "--stack", "{tmp}"], "is a folder, not a YAML file"),
    (["memory", "{tmp}/"], "is a folder"),
    (["memory", "--hf", "{tmp}"], "is a folder; give its config.json"),
    (["memory", "llama-3-8b", "--hardware", "/dev/null"], "not a regular file"),
])
def test_a_folder_is_not_a_spec_file(cli, tmp_path, args, needle):
    # these said "file not found" for something that exists
    assert_one_line_error(cli(*[a.replace("{tmp}", str(tmp_path)) for a in args]), needle)


@pytest.mark.parametrize("args, needle", [
    # serving has no use for training knobs, and training none for the KV cache's dtype: refused,
    # not ignored (the sweep found them silently dropped)
    (["memory", "llama-3-8b", "--kv-dtype", "fp8"], "--kv-dtype is the KV cache's dtype and needs --inference"),
    (["memory", "llama-3-8b", "--inference", "--recompute", "full"], "--recompute describes training"),
    (["memory", "llama-3-8b", "--inference", "--global-batch", "16", "--pp", "2", "--schedule", "interleaved"],
     "--global-batch, --schedule describe training"),
    # memory and step refuse modules without selective recompute; plan/sweep now do the same
    (["plan", "llama-3-8b", "--gpus", "64", "--recompute-modules", "core_attn", "--recompute", "none"],
     "leave selective out"),
    (["sweep", "llama-3-8b", "--gpus", "8,16", "--recompute-modules", "core_attn", "--fix", "recompute=none"],
     "leave selective out"),
    (["plan", "llama-3-8b", "--gpus", "64", "--fix", ""], "expected KNOB=VALUE"),
    (["plan", "llama-3-8b", "--gpus", "64", "--fix", ","], "expected KNOB=VALUE"),
    # an empty entry among real ones was dropped silently while --allow refused it (re-check 2026-12-03)
    (["plan", "llama-3-8b", "--gpus", "64", "--fix", "tp=2,,pp=1"], "an empty entry"),
    (["plan", "llama-3-8b", "--gpus", "64", "--fix", "tp=2,"], "an empty entry"),
])
def test_options_that_do_not_apply(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_inference_batch_still_works(cli):
    assert cli("memory", "llama-3-8b", "--inference", "--batch", "4", "--tp", "2").code == 0


def test_power_per_gpu_printed_as_given(cli):
    # 1.5 W used to print as "2 W" (rounded to whole watts); 12,345 W keeps its separators
    from llmpar.units import fmt_watts

    assert fmt_watts(1.5) == "1.5" and fmt_watts(1275.0) == "1,275" and fmt_watts(12345.0) == "12,345"
    res = cli("step", "llama-3-8b", "--tokens", "1T", "--power-per-gpu", "1.5")
    assert res.code == 0 and "at 1.5 W per GPU" in res.out


def test_offload_layers_negative_says_zero_is_allowed(cli):
    assert_one_line_error(cli("memory", "llama-3-8b", "--offload-layers", "-1"), "0 (none) or a positive integer")


def test_plan_json_says_why_nothing_can_run(cli):
    # exit 1 (a check that failed, docs/architecture.md), the line on stderr, and with --json a document on
    # stdout (it used to print nothing): 405B on 8 GPUs needs 947 GB per GPU at its leanest
    res = cli("plan", "llama-3.1-405b", "--gpus", "8", "--json")
    assert res.code == 1 and "no layout fits" in res.err
    doc = res.json()
    assert doc["feasible"] is False and doc["gpus"] == 8 and doc["hardware"] == "h100-sxm"
    assert "no layout fits" in doc["reason"] and doc["rejected"] is None
    # every candidate breaks a layout rule: the counts per rule come along
    doc = cli("plan", "llama-3-8b", "--gpus", "64", "--microbatches", "3", "--json").json()
    assert doc["feasible"] is False and doc["rejected"]["batch"] > 0


def test_empty_calibrate_options_are_typos(cli):
    from conftest import REPO

    log = REPO / "tests" / "fixtures" / "nccl" / "current_allgather_4r2n.txt"
    assert_one_line_error(cli("calibrate", "fit", log, "--algorithm", ""), "unknown algorithm ''")
    assert_one_line_error(cli("calibrate", "parse", log, "--gpu", ""), "--gpu is empty")


# --- second sweep (2026-12-01) -------------------------------------------------------------------

@pytest.mark.parametrize("option, base, body, needle", [
    # stacks: a 1e30 typo used to print a 1e30 s step; the shipped stacks sit far inside the bounds
    ("--stack", "megatron-core", "fixed: {per_step_s: 1e30}", "field 'fixed.per_step_s'"),
    ("--stack", "megatron-core", "memory: {cuda_context_bytes: 100 TiB}", "field 'memory.cuda_context_bytes'"),
    ("--stack", "megatron-core", "kernels: {launch_s_per_layer: 1e9}", "field 'kernels.launch_s_per_layer'"),
    ("--stack", "megatron-core", "memory: {working_layers: 1e12}", "field 'memory.working_layers'"),
    # hardware (second sweep)
    ("--hardware", "h100-sxm", "gpu: {memory_bandwidth: 1e-30 TB/s}", "outside 1 GB/s .. 1 PB/s"),
    ("--hardware", "h100-sxm", "gpu: {peak_flops: {bf16: 1e30 TFLOPS}}", "outside 1 GFLOP/s .. 1 EFLOP/s"),
    ("--hardware", "h100-sxm", "gpu: {memory: 1e30 GiB}", "above 1 TiB per GPU"),
    ("--hardware", "h100-sxm", "node_power: 1e30 kW", "field 'node_power'"),
    # H100's 16-bit peak is 989 TFLOP/s: an FP8 peak below it made fp8 slower than bf16, silently
    ("--hardware", "h100-sxm", "gpu: {peak_flops: {fp8: 100 TFLOPS}}", "below the 16-bit peak 989"),
    ("--hardware", "h100-sxm", "tiers:\n  - {name: nvlink, bandwidth: 1e-20 GB/s}", "field 'tiers.0.bandwidth'"),
])
def test_spec_values_beyond_any_framework_or_gpu(cli, tmp_path, option, base, body, needle):
    p = tmp_path / "spec.yaml"
    p.write_text(f"name: x\nextends: {base}\n{body}\n")
    assert_one_line_error(cli("memory", "llama-3-8b", option, p), needle)


@pytest.mark.parametrize("args, needle", [
    (["memory", "--params", "1e300"], "outside 1 .. 1e15 parameters"),
    (["memory", "--params", "1e-9"], "outside 1 .. 1e15 parameters"),
])
def test_params_bounds(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_bf16_boundary_layers_bounded_and_not_counted_twice(cli, tmp_path):
    # 2^63 overflowed numpy (a traceback); at pp 1 the first and last N layers overlap once
    # N > L/2: every layer is BF16, so the weights equal the all-BF16 run's (they fell below it)
    p = tmp_path / "s.yaml"
    p.write_text("name: x\nextends: megatron-core\nkernels: {fp8: {bf16_layers_at_start: 9223372036854775807}}\n")
    assert_one_line_error(cli("step", "llama-3-8b", "--gpus", "8", "--dtype", "fp8", "--stack", p),
                          "bf16_layers_at_start")
    bf16 = cli("memory", "llama-3-8b", "--gpus", "8", "--stack", "deepspeed", "--json").json()
    for n in (16, 20, 200):
        p.write_text(f"name: x\nextends: deepspeed\nkernels: {{fp8: {{bf16_layers_at_start: {n}, "
                     f"bf16_layers_at_end: {n}}}}}\n")
        fp8 = cli("memory", "llama-3-8b", "--gpus", "8", "--dtype", "fp8", "--stack", p, "--json").json()
        assert fp8["memory"]["weights_bytes"] == pytest.approx(bf16["memory"]["weights_bytes"], rel=1e-12), n


def test_calibrate_runs_folds_and_train(cli):
    from conftest import REPO

    table = REPO / "validation" / "megatron-core-h100-2024.yaml"
    assert_one_line_error(cli("calibrate", "runs", table, "--folds", "1"), "--folds 1 cannot cross-validate")
    assert_one_line_error(cli("calibrate", "runs", table, "--check", "--folds", "3"), "--check fits nothing")
    # two --train selectors must both hold (click kept only the last): with gpus<=100 and
    # gpus<=200 the fit set is gpus<=100's, so the same runs are held out as with it alone
    one = cli("calibrate", "runs", table, "--train", "gpus<=100", "--fit", "kernels.gemm_efficiency",
              "--folds", "0", "--json").json()
    both = cli("calibrate", "runs", table, "--train", "gpus<=100", "--train", "gpus<=200",
               "--fit", "kernels.gemm_efficiency", "--folds", "0", "--json").json()
    assert both["held_out"]["runs"] == one["held_out"]["runs"]
    # (Llama 3's three 405B runs: two configurations, so --folds 50 is capped at 2 folds, cheaply)
    everything = cli("calibrate", "runs", REPO / "validation" / "llama3-405b-table4.yaml", "--train", "gpus<=100000",
                     "--fit", "kernels.gemm_efficiency", "--folds", "50", "--json").json()
    assert any("nothing is held out" in n for n in everything["notes"])
    assert any("--folds 50" in n for n in everything["notes"])


@pytest.mark.parametrize("value", ['""', ".", "..", "null"])
def test_extends_that_names_nothing(cli, tmp_path, value):
    # `extends: ""` was read as no extends (then "field 'gpu': Field required"); '.'/'..' as a name
    p = tmp_path / "h.yaml"
    p.write_text(f"name: x\nextends: {value}\n")
    assert_one_line_error(cli("hardware", "show", p), "names no hardware")


def test_inference_refuses_optimizer_convention_sp(cli):
    # byte-identical output with and without them before: serving has no optimizer state
    assert_one_line_error(cli("memory", "llama-3-8b", "--inference", "--optimizer", "sgd"), "--optimizer describes")
    assert_one_line_error(cli("memory", "llama-3-8b", "--inference", "--convention", "megatron"),
                          "--convention describes training")
    assert_one_line_error(cli("memory", "llama-3-8b", "--inference", "--no-sp"), "--sp/--no-sp describes training")
    # the Python API refuses sp= the same way (its default is None, so a given value shows)
    import llmpar
    from llmpar.errors import UserError

    with pytest.raises(UserError, match="--sp/--no-sp describes training"):
        llmpar.memory("llama-3-8b", inference=True, sp=False)


def test_a_count_split_by_a_space_says_so(cli):
    """`memory --params 7.5 B`: the shell hands "B" over as the MODEL, and the message had been
    "give either a MODEL or --params, not both" (review of 2026-12-03)."""
    assert_one_line_error(cli("memory", "--params", "7.5", "B"), "--params 7.5 B", "--params 7.5B")
