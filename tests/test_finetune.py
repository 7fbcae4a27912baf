"""Fine-tuning: full, LoRA and QLoRA (cost/finetune.py, docs/finetune.md; issue 26 item 3).

Every expected number is derived by hand beside its test from the model's shapes (models/*.yaml),
LoRA's r (d_in + d_out) per adapted matrix (Hu et al. 2021 §4.1) and QLoRA's 4.127-bit NF4 with
double quantization (Dettmers et al. 2023 §3).
"""

from __future__ import annotations


import pytest

import llmpar
from llmpar.cost import finetune as FT
from llmpar.errors import UserError
from llmpar.parallel import Settings
from llmpar.cost import flops
from llmpar.specs import load_model
from tests.conftest import assert_one_line_error

# Llama 3 8B (models/llama-3-8b.yaml): h 4096, 32 heads of 128, 8 KV heads, FFN 14336 (SwiGLU), 32 layers
H, KV, F, L = 4096, 1024, 14336, 32
# every block linear: q, k, v, o, gate, up, down as (d_in, d_out)
LINEARS = [(H, H), (H, KV), (H, KV), (H, H), (H, F), (H, F), (F, H)]
LINEAR_PARAMS = sum(i * o for i, o in LINEARS) * L          # 218,103,808 x 32 = 6,979,321,856
ADAPTERS_R16_ALL = 16 * sum(i + o for i, o in LINEARS) * L  # 16 x 81,920 x 32 = 41,943,040


def test_nf4_with_double_quantization_is_4_127_bits():
    # QLoRA §3: 4 bits + 8-bit constants per 64 weights + fp32 second-level constants per 256 x 64:
    # 4 + 0.125 + 0.001953125 = 4.126953125 bits = 0.515869140625 B
    assert FT.NF4_BITS == pytest.approx(4.126953125, abs=1e-12)
    assert FT.NF4_BYTES == pytest.approx(0.515869140625, abs=1e-12)


def test_adapter_counts_match_the_papers_and_a_published_count():
    m8 = load_model("llama-3-8b")
    assert LINEAR_PARAMS == 6_979_321_856 and ADAPTERS_R16_ALL == 41_943_040
    assert FT.adapter_params_per_layer(m8, False, "all", 16) * L == ADAPTERS_R16_ALL
    # q and v only, r = 8: (4096 + 4096) + (4096 + 1024) = 13,312 x 8 x 32 = 3,407,872
    assert FT.adapter_params_per_layer(m8, False, "qv", 8) * L == 3_407_872
    # LitGPT's resource tables (tutorials/resource-tables.md, 2023-10-20) print 4,194,304 trainable
    # parameters for Llama 2 7B with r = 8 on q and v: 32 x 2 x (8 x 4096 + 4096 x 8) (MHA: v is 4096 wide)
    m2 = load_model("llama-2-7b")
    assert FT.adapter_params_per_layer(m2, False, "qv", 8) * m2.layers == 4_194_304
    # attention (q, k, v, o), r = 4: (8192 + 5120 + 5120 + 8192) x 4 = 106,496 per layer
    assert FT.adapter_params_per_layer(m8, False, "attention", 4) == 106_496


def test_qlora_memory_of_llama_3_8b_term_by_term():
    r = llmpar.memory("llama-3-8b", gpus=1, seq=2048, recompute="full", finetune="qlora", grad_dtype="bf16")
    total = r.params_total
    mem = r.memory
    # frozen base: linear weights NF4, everything else (embedding, head, norms) 2 B; adapters 2 B
    want_w = LINEAR_PARAMS * FT.NF4_BYTES + (total - LINEAR_PARAMS) * 2.0 + ADAPTERS_R16_ALL * 2.0
    assert mem["weights_bytes"] == pytest.approx(want_w, rel=1e-9)
    assert want_w == pytest.approx(5.788e9, rel=1e-3)            # 3.600 + 2.104 + 0.084 GB
    # gradients and optimizer states of the adapters only: 2 B (bf16) and 12 B (Adam: fp32 master, m, v)
    assert mem["gradients_bytes"] == pytest.approx(ADAPTERS_R16_ALL * 2.0, rel=1e-9)
    assert mem["optimizer_bytes"] == pytest.approx(ADAPTERS_R16_ALL * 12.0, rel=1e-9)
    # full fine-tuning of the same layout holds 2 + 2 + 12 B for all 8.03 B parameters
    full = llmpar.memory("llama-3-8b", gpus=1, seq=2048, recompute="full", grad_dtype="bf16")
    assert full.memory["optimizer_bytes"] == pytest.approx(total * 12.0, rel=1e-9)
    # activations are the same model (an adapter saves its layer's input as the weight gradient did)
    assert mem["activations_bytes"] == pytest.approx(full.memory["activations_bytes"], rel=1e-9)
    assert any("41.9M trainable parameters" in a for a in r.assumptions)


def test_lora_zero3_shards_the_frozen_base_and_the_adapter_states():
    kw = dict(gpus=8, dp=8, seq=2048, recompute="full", finetune="lora", lora_targets="qv", lora_rank=8,
              grad_dtype="bf16")
    z0 = llmpar.memory("llama-3-8b", zero=0, **kw)
    z3 = llmpar.memory("llama-3-8b", zero=3, **kw)
    a = 3_407_872
    assert z0.memory["optimizer_bytes"] == pytest.approx(12.0 * a, rel=1e-9)
    assert z3.memory["optimizer_bytes"] == pytest.approx(12.0 * a / 8, rel=1e-9)
    # ZeRO-3: weights / 8 plus the two gathered 16-bit layers (2 x 2 B x one layer's 218.1M + 2 x 4096 norm params)
    layer = LINEAR_PARAMS / L + 2 * H
    want = (z0.params_total * 2.0 + a * 2.0) / 8 + 2 * 2.0 * layer
    assert z3.memory["weights_bytes"] == pytest.approx(want, rel=1e-9)


def test_finetune_flops_are_forward_plus_input_gradients_plus_adapters():
    m = load_model("llama-3-8b")
    s = 2048
    st = Settings(finetune="lora", lora_rank=16, lora_targets="all")
    fwd = flops.forward_flops_per_sequence(m, s)
    att = flops.attention_flops(m, 1, s)
    core = L * (att["attn_scores"] + att["attn_context"])
    # adapters: 2 r (d_in + d_out) per token per adapted matrix: 2 x 16 x 81,920 x 32 layers x 2048 tokens
    adapters = 2 * 16 * 81_920 * L * s
    assert adapters == 171_798_691_840
    assert flops.finetune_flops_per_sequence(m, s, st) == pytest.approx(2 * fwd + core + 3 * adapters, rel=1e-12)
    # below full training's 3F by F - core - 3A
    assert flops.finetune_flops_per_sequence(m, s, st) < 3 * fwd


def test_lora_step_drops_the_weight_gradients_and_adds_the_adapter_traffic():
    kw = dict(gpus=8, seq=2048, global_batch=64, micro_batch=1, zero=1, recompute="none")
    full = llmpar.step("llama-3-8b", **kw)
    lora = llmpar.step("llama-3-8b", finetune="lora", lora_targets="qv", lora_rank=8, **kw)
    pf, pl = full.detail["parts"], lora.detail["parts"]
    # forward: + the adapter path's FLOPs at the peak + its bytes at HBM bandwidth. Per token and
    # layer, q: 4096 + 2x8 + 6x4096 = 28,688 elements, v: 4096 + 16 + 6x1024 = 10,256: 38,944 x 2 B
    hw = llmpar.load_hardware("h100-sxm")
    T = 2048
    bytes_f = 38_944 * 2 * T
    flops_f = 2 * 8 * ((H + H) + (H + KV)) * T
    ad_f = flops_f / hw.gpu.peak("bf16") + bytes_f / (hw.gpu.memory_bandwidth * hw.gpu.memory_efficiency)
    assert pl["layer_forward_s"] - pf["layer_forward_s"] == pytest.approx(ad_f, rel=1e-6)
    # the adapters' few gradients are all the data-parallel ring reduces: 3,407,872 x 4 B (the stack
    # reduces in fp32) x 2 (n - 1) / n at ZeRO-1 as reduce-scatter + all-gather of 2-byte weights
    a = 3_407_872
    assert lora.comm_bytes_per_gpu["dp"] == pytest.approx(a * 4 * 7 / 8 + a * 2 * 7 / 8, rel=1e-9)
    assert lora.step_time_s < full.step_time_s
    # no optimizer step over 8 B parameters: the adapters' is a thousandth of it
    assert lora.breakdown_s["optimizer"] < full.breakdown_s["optimizer"] / 1000


def test_qlora_dequantises_each_weight_before_its_forward_and_its_backward():
    kw = dict(gpus=1, seq=2048, global_batch=8, micro_batch=1, recompute="none", lora_targets="qv", lora_rank=8)
    lo = llmpar.step("llama-3-8b", finetune="lora", **kw)
    q = llmpar.step("llama-3-8b", finetune="qlora", **kw)
    hw = llmpar.load_hardware("h100-sxm")
    # one pass: read 0.5159 B and write 2 B per linear weight of a layer (218,103,808 of them)
    deq = LINEAR_PARAMS / L * (FT.NF4_BYTES + 2.0) / (hw.gpu.memory_bandwidth * hw.gpu.memory_efficiency)
    for k in ("layer_forward_s", "layer_backward_s"):
        assert q.detail["parts"][k] - lo.detail["parts"][k] == pytest.approx(deq, rel=1e-6)


def test_the_planner_searches_data_parallel_layouts_only():
    r = llmpar.plan("llama-3-8b", gpus=8, finetune="qlora", seq=2048, global_batch=64, top=5)
    assert all((p.parallel.tp, p.parallel.pp, p.parallel.cp) == (1, 1, 1) for p in r.plans)
    assert r.space.rejected["finetune"] > 0
    # no published LoRA/QLoRA run is in validation/: the interval says it is extrapolated
    assert r.best.interval["evidence"]["extrapolated"]
    assert "+qlora" in r.best.interval["evidence"]["class"]


@pytest.mark.parametrize("args, needles", [
    (("memory", "llama-3-8b", "--finetune", "lora", "--tp", "2", "--gpus", "8"), ("--finetune lora", "tp 2")),
    (("memory", "llama-3-8b", "--lora-rank", "8"), ("--lora-rank", "--finetune")),
    (("memory", "llama-3-8b", "--finetune", "lora", "--inference"), ("--finetune",)),
    (("memory", "--params", "7B", "--finetune", "qlora"), ("--finetune",)),
    (("memory", "llama-3-8b", "--finetune", "qlora", "--dtype", "fp8"), ("16 bits",)),
    (("memory", "llama-3-8b", "--finetune", "lora", "--convention", "megatron"), ("--convention",)),
    (("memory", "llama-3-8b", "--finetune", "lora", "--lora-rank", "0"), ("--lora-rank",)),
    (("step", "llama-3-8b", "--finetune", "qlora", "--gpus", "8", "--pp", "2"), ("pp 2",)),
])
def test_bad_finetune_input_is_one_line(cli, args, needles):
    assert_one_line_error(cli(*args), *needles)


def test_the_api_refuses_a_bad_rank_and_targets():
    with pytest.raises(UserError, match="--lora-rank"):
        Settings(finetune="lora", lora_rank=True)
    with pytest.raises(UserError, match="--lora-targets"):
        Settings(finetune="lora", lora_targets="mlp")


def test_a_lora_checkpoint_holds_the_adapters_and_their_optimizer_states_only():
    from llmpar.cost.training import checkpoint_bytes_of

    m = load_model("llama-3-8b")
    # 41,943,040 adapters x (2 B weights + 12 B Adam) = 587,202,560 B; full training: 8.03e9 x 14
    assert checkpoint_bytes_of(m, Settings(finetune="qlora")) == pytest.approx(ADAPTERS_R16_ALL * 14.0, rel=1e-12)
    assert ADAPTERS_R16_ALL * 14 == 587_202_560
    from llmpar.cost.params import total_params

    assert checkpoint_bytes_of(m, Settings()) == pytest.approx(total_params(m) * 14.0, rel=1e-12)


def test_a_rank_above_a_matrix_side_is_refused(cli):
    # Llama 3 8B's narrowest adapted matrices are k and v, 4096 x 1024: rank 1025 is not low-rank there
    assert_one_line_error(cli("memory", "llama-3-8b", "--finetune", "lora", "--lora-rank", "1025", "--gpus", "1"),
                          "--lora-rank 1025", "4096 x 1024")
    assert cli("memory", "llama-3-8b", "--finetune", "lora", "--lora-rank", "1024", "--gpus", "1").code == 0


def test_qlora_zero3_gathers_the_quantised_storage():
    kw = dict(gpus=8, dp=8, zero=3, seq=2048, recompute="full", finetune="qlora", lora_targets="qv", lora_rank=8,
              grad_dtype="bf16")
    r = llmpar.memory("llama-3-8b", **kw)
    a = 3_407_872
    lin_layer = LINEAR_PARAMS / L
    # shards: (NF4 x linear + 2 B x the rest + 2 B x adapters) / 8; gathered: two layers of
    # 218.1M linear weights at NF4 and 8,192 norm weights at 2 B
    want = ((LINEAR_PARAMS * FT.NF4_BYTES + (r.params_total - LINEAR_PARAMS) * 2.0 + a * 2.0) / 8
            + 2 * (lin_layer * FT.NF4_BYTES + 2 * H * 2.0))
    assert r.memory["weights_bytes"] == pytest.approx(want, rel=1e-9)


def test_the_default_rank_above_a_router_s_width_is_said_not_refused(cli):
    """Fuzz review 2026-12-04: `--finetune lora` on Mixtral failed with every default ("--lora-rank
    16 exceeds mixtral-8x7b's router matrix (4096 x 8)"), blaming an option not given. PEFT builds
    the adapter, r (d_in + d_out) = 16 x 4,104 = 65,664 parameters per MoE layer, which is counted;
    the note says the router is no longer low-rank there and how to change it."""
    r = cli("memory", "mixtral-8x7b", "--gpus", "16", "--finetune", "lora")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    assert "rank 16 is above the smaller side of router (4096 x 8)" in text and "--lora-rank 8 or less" in text
    assert cli("plan", "mixtral-8x7b", "--gpus", "16", "--finetune", "lora").code == 0
