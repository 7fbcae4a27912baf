"""`llmpar step`: the JSON contract, agreement with the library, and one-line errors."""

import pytest

from conftest import assert_one_line_error

STEP_KEYS = {"model", "hardware", "gpus", "parallel", "step_time_s", "tokens_per_s", "model_tflops_per_gpu",
             "hardware_tflops_per_gpu", "mfu", "hfu", "breakdown_s", "comm_bytes_per_gpu", "memory"}
PARALLEL_KEYS = {"tp", "pp", "dp", "cp", "ep", "etp", "zero", "sp", "recompute", "micro_batch", "global_batch",
                 "microbatches", "seq", "schedule", "virtual_stages", "recompute_layers"}


def test_json_contract_and_arithmetic(cli):
    res = cli("step", "llama-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--zero", "1", "--global-batch", "128",
              "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert STEP_KEYS <= set(d) and PARALLEL_KEYS <= set(d["parallel"])
    assert d["model"] == "llama-3-70b" and d["model_requested"] == "llama-70b"
    assert set(d["breakdown_s"]) == {"compute", "recompute", "tp", "pp", "dp", "cp", "ep", "offload", "bubble", "optimizer",
                                     "fixed"}
    assert set(d["comm_bytes_per_gpu"]) == {"tp", "pp", "dp", "cp", "ep"}
    # dp = 64 / (8*2) = 4; m = 128 / (1*4) = 32; tokens per step = 128 * 8192 = 1,048,576
    assert (d["parallel"]["dp"], d["parallel"]["microbatches"], d["tokens_per_step"]) == (4, 32, 1_048_576)
    assert sum(d["breakdown_s"].values()) == pytest.approx(d["step_time_s"], rel=1e-12)
    assert d["tokens_per_s"] == pytest.approx(1_048_576 / d["step_time_s"], rel=1e-12)
    # MFU = model TFLOP/s per GPU / peak (H100 bf16 989 TFLOP/s)
    assert d["mfu"] == pytest.approx(d["model_tflops_per_gpu"] / 989, rel=1e-12)
    assert d["memory"]["fits"] in (True, False) and d["memory"]["total_bytes"] > 0


def test_table_and_explain(cli):
    res = cli("step", "gpt3-175b", "--hardware", "a100-80gb", "--gpus", "1024", "--tp", "8", "--pp", "16",
              "--global-batch", "1536", "--recompute", "full", "--explain")
    assert res.code == 0, res.err
    for needle in ("per step", "MFU", "bubble", "Shoeybi 2019", "Narayanan 2021", "FITS"):
        assert needle in res.out


def test_library_and_cli_agree(cli):
    from llmpar import api

    r = api.step("llama-3-8b", gpus=8, tp=2, global_batch=64, recompute="selective")
    d = cli("step", "llama-3-8b", "--gpus", "8", "--tp", "2", "--global-batch", "64", "--recompute", "selective",
            "--json").json()
    assert d["step_time_s"] == r.step_time_s


@pytest.mark.parametrize("args,needle", [
    (("llama-3-7b",), "did you mean"),
    (("llama-3-70b", "--gpus", "100", "--tp", "8"), "not divisible"),
    (("llama-3-70b", "--gpus", "64", "--tp", "8", "--dp", "2"), "disagrees"),
    (("llama-3-70b", "--gpus", "16", "--global-batch", "7"), "global-batch"),
    (("llama-3-70b", "--tp", "3"), "heads"),
    (("llama-3-70b", "--pp", "2", "--virtual-stages", "41"), "virtual-stages"),
    (("llama-3-70b", "--schedule", "nope"), "schedule"),
    (("llama-3-70b", "--dp-overlap", "1.5"), "dp-overlap"),
    (("llama-3-70b", "--micro-batch", "-1"), "positive"),
    ((), "model"),
])
def test_bad_input(cli, args, needle):
    assert_one_line_error(cli("step", *args), needle)


def test_rank_order_moves_tp_off_the_node(cli):
    # tp=8, dp=2 on 2 DGX H100 nodes. Order tp-cp-dp-pp puts each TP group inside a node (fast
    # NVLink); dp-cp-tp-pp puts the 2 DP replicas side by side, so a TP group of 8 spans 2 nodes
    # (4 per node) and its collectives cross InfiniBand: beta = 4 NIC shares x 50 GB/s x 0.94 =
    # 188 GB/s instead of NVLink's ~369 GB/s ring busbw, so the TP term grows by ~2x.
    base = ("llama-3-8b", "--gpus", "16", "--tp", "8", "--global-batch", "16", "--json")
    inner = cli("step", *base).json()
    outer = cli("step", *base, "--rank-order", "dp-cp-tp-pp").json()
    assert outer["breakdown_s"]["tp"] > 1.5 * inner["breakdown_s"]["tp"]
    assert_one_line_error(cli("step", *base, "--rank-order", "tp-dp-pp"), "rank-order")


def test_mfu_never_above_hfu_or_one_at_long_context(cli):
    # issue 9 item 2: at 16M tokens of context the s² attention dominates; counting it in full
    # while the causal kernel runs half made MFU 90.6 % on h100 (127-150 % on stronger profiles).
    # The headline now counts causally (<= what the kernel executes): MFU <= HFU <= 1, and the
    # full-s² figure is reported beside it under its own name.
    for hw in ("h100-sxm", "b200", "gb200-nvl72"):
        res = cli("step", "llama-3-8b", "--gpus", "64", "--cp", "64", "--seq", "16777216", "--global-batch", "1",
                  "--hardware", hw, "--json")
        assert res.code == 0, res.err
        d = res.json()
        assert d["mfu_convention"] == "causal"
        assert 0 < d["mfu"] <= d["hfu"] <= 1.0
        # full counting doubles the attention FLOPs, which dominate here: about 2x the causal MFU
        assert 1.9 * d["mfu"] < d["mfu_full_attention"] < 2.0 * d["mfu"]
