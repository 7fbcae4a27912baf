"""`llmpar memory` through the real entry point (in-process): output, JSON contract, bad input."""

from __future__ import annotations

import json

import pytest

from conftest import assert_one_line_error

import llmpar.api as api

PSI_70B = 70_553_706_496          # Llama-3-70B, exact (issue 2; cost/params)
GIB = 2**30

JSON_KEYS = {
    "model", "model_requested", "hardware", "gpus", "mode", "parallel", "settings", "params_total",
    "params_per_gpu", "bytes_per_param", "memory", "model_states_bytes", "activation_bytes_per_layer",
    "capacity_bytes", "usable_bytes", "fits", "max_micro_batch", "most_loaded_stage", "assumptions",
}
PARALLEL_KEYS = {"tp", "pp", "dp", "cp", "ep", "etp", "zero", "sp", "recompute", "micro_batch", "global_batch",
                 "microbatches", "seq", "schedule", "virtual_stages", "recompute_layers", "offload_layers"}
MEMORY_KEYS = {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "kv_cache_bytes",
               "buffers_bytes", "allocated_bytes", "allocator_overhead_bytes", "reserved_bytes", "runtime_bytes",
               "total_bytes", "margin_bytes"}
# The ZeRO paper's 16 B/param counts 16-bit gradients (§3.1): the tests that reproduce it say so
# (the default stack, megatron-core, keeps fp32 main grads: 18 B/param).
ZERO_PAPER = ("--grad-dtype", "bf16")


def test_readme_job_json(cli):
    res = cli("memory", "llama-3-70b", "--zero", "3", "--dp", "8", "--json", *ZERO_PAPER)
    assert res.code == 0, res.err
    d = res.json()
    assert JSON_KEYS <= set(d) and set(d["parallel"]) == PARALLEL_KEYS and set(d["memory"]) == MEMORY_KEYS
    assert (d["model"], d["hardware"], d["gpus"], d["mode"]) == ("llama-3-70b", "h100-sxm", 8, "training")
    assert d["params_total"] == PSI_70B and d["params_per_gpu"] == PSI_70B
    mem = d["memory"]
    # ZeRO-3 over 8: Adam 12 B x Ψ / 8 = 105,830,559,744 B
    assert mem["optimizer_bytes"] == pytest.approx(12 * PSI_70B / 8)
    # weights 2Ψ/8 + two gathered bf16 layers 2·2·855,654,400; grads 2Ψ/8 + one layer 2·855,654,400
    assert mem["weights_bytes"] == pytest.approx(2 * PSI_70B / 8 + 4 * 855_654_400)
    assert mem["gradients_bytes"] == pytest.approx(2 * PSI_70B / 8 + 2 * 855_654_400)
    # activations, b = 1, s = 8192, no TP: 80 layers x 274,688 B/token x 8192 tokens (test_memory's
    # Llama block) + the 16-bit logits 2·8192·128256 (megatron-core: Transformer Engine's
    # parallel_cross_entropy keeps them and writes the gradient into them) + final-norm and head
    # inputs 2·2·8192·8192 + ids 8·8192
    act = 80 * 274_688 * 8192 + 2 * 8192 * 128256 + 4 * 8192 * 8192 + 8 * 8192
    assert mem["activations_bytes"] == pytest.approx(act)
    # megatron-core: allocator pool 1.03 x allocated (overhead 0.03); runtime 0.6 GiB + 0.25 GiB x (dp, world) communicators
    assert mem["reserved_bytes"] == pytest.approx(1.03 * mem["allocated_bytes"])
    assert mem["runtime_bytes"] == pytest.approx(0.6 * GIB + 2 * 0.25 * GIB)
    parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "buffers_bytes", "kv_cache_bytes")
    assert mem["allocated_bytes"] == pytest.approx(sum(mem[k] for k in parts))
    assert mem["total_bytes"] == pytest.approx(mem["reserved_bytes"] + mem["runtime_bytes"])
    assert mem["margin_bytes"] == pytest.approx(80 * GIB - mem["total_bytes"])
    assert d["verdict"] == "does_not_fit" and d["settings"]["stack"] == "megatron-core"
    assert d["capacity_bytes"] == 80 * GIB
    assert d["fits"] is False and d["max_micro_batch"] == 0       # 146 GB of states alone > 80 GiB


def test_readme_job_table(cli):
    res = cli("memory", "llama-3-70b", "--zero", "3", "--dp", "8")
    assert res.code == 0                                          # DOES NOT FIT still exits 0
    for needle in ("weights", "gradients", "optimizer states", "activations", "reserve", "total", "share",
                   "DOES NOT FIT", "GB = 1e9 bytes", "105.83"):
        assert needle in res.out, needle


def test_alias_and_one_node_default(cli):
    d = cli("memory", "llama-70b", "--zero", "3", "--json").json()
    assert d["model"] == "llama-3-70b" and d["model_requested"] == "llama-70b"
    assert d["gpus"] == 8 and d["parallel"]["dp"] == 8              # one DGX, all data-parallel
    assert any("llama-70b -> llama-3-70b" in a for a in d["assumptions"])
    assert any("one node" in a for a in d["assumptions"])
    out = cli("memory", "llama-70b", "--zero", "3").out
    assert "llama-3-70b (from llama-70b)" in out and "one node" in out


def test_params_70b_zero0_shows_1_12_tb(cli):
    res = cli("memory", "--params", "70B", "--zero", "0", *ZERO_PAPER)
    assert res.code == 0
    assert "1.12 TB" in res.out                                   # 70e9 x 16 B
    d = cli("memory", "--params", "70B", "--zero", "0", "--json", *ZERO_PAPER).json()
    assert d["model_states_bytes"] == pytest.approx(1.12e12)
    assert d["mode"] == "model_states" and d["max_micro_batch"] is None


def test_seed_004_zero3_on_8_gpus_is_140_gb(cli):
    # seed 004 says "ZeRO-3 over 8 GPUs ≈ 280 GB/GPU": it is 1.12 TB / 8 = 140 GB
    d = cli("memory", "--params", "70B", "--zero", "3", "--dp", "8", "--json", *ZERO_PAPER).json()
    assert d["model_states_bytes"] == pytest.approx(140e9)


@pytest.mark.parametrize("zero,n,printed", [(1, 64, 31.4), (2, 64, 16.6), (3, 64, 1.88), (1, 4, 52.5)])
def test_params_zero_paper(cli, zero, n, printed):
    # ZeRO paper Table 1 (7.5B): (4 + 12/N)Ψ, (2 + 14/N)Ψ, 16Ψ/N
    d = cli("memory", "--params", "7.5B", "--zero", str(zero), "--dp", str(n), "--json", *ZERO_PAPER).json()
    assert round(d["model_states_bytes"] / 1e9, 2 if printed < 2 else 1) == printed


def test_conventions_cli(cli):
    d = cli("memory", "--params", "10B", "--convention", "megatron", "--zero", "1", "--dp", "8", "--json").json()
    assert d["model_states_bytes"] == pytest.approx((6 + 12 / 8) * 10e9)     # Megatron distributed optimizer
    d = cli("memory", "--params", "10B", "--convention", "deepspeed", "--zero", "2", "--dp", "8", "--json").json()
    assert d["model_states_bytes"] == pytest.approx(2 * 10e9 + 18 * 10e9 / 8)  # DeepSpeed estimate_zero2


def test_units_gib(cli):
    out = cli("memory", "--params", "70B", "--zero", "3", "--dp", "8", "--units", "gib").out
    # optimizer 12·70e9/8 = 105e9 B = 97.79 GiB
    assert "GiB" in out and "97.79" in out


def test_explain(cli):
    res = cli("memory", "llama-3-70b", "--tp", "8", "--pp", "2", "--gpus", "16", "--microbatches", "8", "--explain")
    assert res.code == 0
    for needle in ("How each term is computed", "Korthikanti", "Rajbhandari", "SwiGLU"):
        assert needle in res.out, needle
    d = cli("memory", "llama-3-70b", "--tp", "8", "--pp", "2", "--gpus", "16", "--microbatches", "8",
            "--explain", "--json").json()
    terms = d["terms"]
    assert {"component", "name", "bytes", "formula", "values", "source"} <= set(terms[0])
    assert sum(t["bytes"] for t in terms if t["component"] == "optimizer") == pytest.approx(d["memory"]["optimizer_bytes"])


def test_per_stage_uneven(cli):
    # 126 layers on 16 stages is valid (Llama 3.1 405B was trained so); first and last stage get 7
    d = cli("memory", "llama-405b", "--tp", "8", "--pp", "16", "--gpus", "1024", "--zero", "1",
            "--recompute", "selective", "--microbatches", "64", "--per-stage", "--json").json()
    assert d["model"] == "llama-3.1-405b"
    layers = [s["layers"] for s in d["stages"]]
    assert len(layers) == 16 and sum(layers) == 126 and layers[0] == layers[-1] == 7
    assert d["memory"]["total_bytes"] == pytest.approx(max(s["total_bytes"] for s in d["stages"]))
    out = cli("memory", "llama-405b", "--tp", "8", "--pp", "16", "--gpus", "1024", "--zero", "1",
              "--microbatches", "64", "--per-stage").out
    assert "Per pipeline stage" in out


def test_inference(cli):
    d = cli("memory", "llama-3-70b", "--inference", "--tp", "8", "--batch", "16", "--context", "8192", "--json").json()
    assert d["mode"] == "inference" and d["inference"] == {"batch": 16, "context": 8192, "kv_dtype": "bf16"}
    # KV: 2·80·8·128·8192·16·2 B / 8 = 5,368,709,120 B per GPU
    assert d["memory"]["kv_cache_bytes"] == pytest.approx(5_368_709_120)
    assert d["memory"]["gradients_bytes"] == 0 and d["memory"]["optimizer_bytes"] == 0
    d8 = cli("memory", "llama-3-70b", "--inference", "--tp", "8", "--batch", "16", "--context", "8192",
             "--kv-dtype", "fp8", "--json").json()
    assert d8["memory"]["kv_cache_bytes"] == pytest.approx(5_368_709_120 / 2)
    assert d["fits"] and "largest batch that fits" in cli("memory", "llama-3-70b", "--inference", "--tp", "8").out


def test_hf_config(cli, tmp_path):
    cfg = {  # meta-llama/Meta-Llama-3-8B config.json
        "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
        "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256,
    }
    path = tmp_path / "Meta-Llama-3-8B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    d = cli("memory", "--hf", str(path), "--dp", "1", "--json").json()
    assert d["params_total"] == 8_030_261_248                       # Llama-3-8B, published
    assert d["memory"]["optimizer_bytes"] == pytest.approx(12 * 8_030_261_248)
    d2 = cli("memory", str(path), "--dp", "1", "--json").json()      # a config.json path in place of MODEL
    assert d2["memory"] == d["memory"]


def test_api_matches_cli(cli):
    r = api.memory("llama-3-70b", tp=8, pp=2, gpus=16, microbatches=8, zero=1, recompute="selective")
    d = cli("memory", "llama-3-70b", "--tp", "8", "--pp", "2", "--gpus", "16", "--microbatches", "8",
            "--zero", "1", "--recompute", "selective", "--json").json()
    assert d == json.loads(json.dumps(r.to_dict()))


# ==================================================================================== bad input

@pytest.mark.parametrize("args,needles", [
    (["llama-3-7b"], ["unknown model", "did you mean"]),
    (["llama-3-70b", "--hardware", "h100-sxn"], ["unknown hardware", "did you mean"]),
    (["llama-3-70b", "--tp", "3"], ["tp=3", "heads"]),
    (["llama-3-70b", "--tp", "16"], ["KV heads"]),
    (["mixtral-8x7b", "--ep", "3"], ["experts"]),
    (["mixtral-8x7b", "--ep", "4", "--dp", "2"], ["dp*cp"]),
    (["llama-3-70b", "--pp", "81"], ["80 layers"]),
    (["llama-3-70b", "--gpus", "12", "--tp", "8"], ["not divisible"]),
    (["llama-3-70b", "--gpus", "64", "--tp", "8", "--dp", "4"], ["disagrees"]),
    (["llama-3-70b", "--micro-batch", "0"], ["micro-batch", "positive"]),
    (["llama-3-70b", "--seq", "-1"], ["seq", "positive"]),
    (["llama-3-70b", "--gpus", "0"], ["gpus", "positive"]),
    (["llama-3-70b", "--tp", "x"], ["--tp"]),
    (["--params", "0"], ["--params", "positive"]),
    (["--params", "-7B"], ["--params"]),
    (["--params", "lots"], ["--params"]),
    (["llama-3-70b", "--reserve", "lots"], ["--reserve"]),
    (["llama-3-70b", "--reserve", "200GiB"], ["--reserve"]),
    (["llama-3-70b", "--convention", "megatron", "--zero", "2"], ["megatron"]),
    (["llama-3-70b", "--convention", "deepspeed", "--zero", "1"], ["deepspeed"]),
    (["llama-3-70b", "--convention", "deepspeed", "--zero", "3", "--optimizer", "sgd"], ["adam"]),
    (["llama-3-70b", "--params", "7B"], ["not both"]),
    ([], ["MODEL"]),
    (["llama-3-70b", "--batch", "4"], ["--inference"]),
    (["llama-3-70b", "--inference", "--zero", "3"], ["--zero"]),
    (["llama-3-70b", "--inference", "--batch", "0"], ["--batch"]),
    (["llama-3-70b", "--inference", "--context", "-8"], ["--context"]),
    (["--params", "7B", "--per-stage"], ["--per-stage"]),
    (["llama-3-70b", "--zero", "4"], ["--zero"]),
    (["llama-3-70b", "--pp", "4", "--schedule", "interleaved", "--virtual-stages", "2", "--microbatches", "6"],
     ["multiple"]),
    (["llama-3-70b", "--hf", "nowhere/config.json"], ["not both"]),
    (["--hf", "nowhere/config.json"], ["not found"]),
])
def test_bad_input(cli, args, needles):
    assert_one_line_error(cli("memory", *args), *needles)


def test_bad_yaml_files(cli, tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nlayers: [1,\n")
    assert_one_line_error(cli("memory", str(bad)), "broken.yaml:")          # file and line
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("name: wrong\nlayers: 0\nhidden: 8\nheads: 1\nffn_hidden: 8\nvocab: 8\nmax_seq: 8\n")
    assert_one_line_error(cli("memory", str(wrong)), "layers")              # which field, why
    hw = tmp_path / "hw.yaml"
    hw.write_text("extends: h100-sxm\nname: mine\nreserve: 100 GiB\n")
    assert_one_line_error(cli("memory", "llama-3-70b", "--hardware", str(hw)), "reserve")
    # job_domain must be whole trays (4 GPUs) and at most the 72-GPU rack
    for bad_domain in (70, 76):
        hw.write_text(f"extends: gb200-nvl72\nname: mine\njob_domain: {bad_domain}\n")
        assert_one_line_error(cli("memory", "llama-3-70b", "--hardware", str(hw)), "job_domain")
    hw.write_text("extends: gb200-nvl72\nname: mine\njob_domain: 72\n")
    assert cli("memory", "llama-3-70b", "--hardware", str(hw)).code == 0
