"""cost/memory: model states, activations, pipeline stages, inference, fit (docs/memory.md).

Every expected number is derived by hand beside it, or is a paper's printed value (cited).
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from llmpar.cost import activations_ends as AE
from llmpar.cost import memory as M
from llmpar.cost import memory_stage as MS
from llmpar.cost import params as P
from llmpar.cost import runtime as RT
from llmpar.cost import shards as SH
from llmpar.cost.pipeline import in_flight_microbatches
from llmpar.errors import UserError
from llmpar.parallel import SCHEDULES, Parallel, Settings
from llmpar.specs import load_hardware, load_model
from llmpar.specs.model import ModelSpec

from conftest import SHARED

HW = load_hardware("h100-sxm")
GIB = 2**30
LLAMA70 = load_model("llama-3-70b")
GPT22 = load_model("megatron-gpt-22b")
MIXTRAL = load_model("mixtral-8x7b")
DSV3 = load_model("deepseek-v3")
S1F1B, SGPIPE, SINTER, SZB, SDUAL = (SCHEDULES.index(s) for s in ("1f1b", "gpipe", "interleaved", "zb-h1", "dualpipe"))


# The ZeRO paper (Rajbhandari et al. 2019 §3.1) counts 16-bit gradients: 2 + 2 + K = 16 B/param. That is
# the paper's accounting, not a framework's default (the default stack, megatron-core, keeps fp32 main
# grads: 18 B/param), so the tests that reproduce the paper say so with grad_dtype="bf16".
ZERO_PAPER = {"grad_dtype": "bf16"}


def states(count, **kw):
    """weights + gradients + optimizer bytes of a bare count, and the dict itself."""
    settings = Settings(**{k: kw.pop(k) for k in list(kw) if k in ("dtype", "optimizer", "grad_dtype", "convention")})
    r = M.model_states_for_count(count, Parallel(**kw), settings)
    return r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"], r


# ============================================================================ bytes per param

@pytest.mark.parametrize("kw,expected", [
    # ZeRO §3.1: bf16 weight 2 + bf16 grad 2 + Adam K = 12 (fp32 master, m, v) = 16
    (dict(ZERO_PAPER), (2, 2, 12)),
    (dict(ZERO_PAPER, optimizer="adamw"), (2, 2, 12)),
    # the default stack (megatron-core) keeps fp32 main grads: 2 + 4 + 12 = 18
    (dict(), (2, 4, 12)),
    # a stack without an fp32 main-grad buffer (DeepSpeed: bf16 gradients) gets 16
    (dict(stack="deepspeed"), (2, 2, 12)),
    # SGD with momentum: fp32 master 4 + momentum 4 = 8
    (dict(ZERO_PAPER, optimizer="sgd"), (2, 2, 8)),
    # 8-bit Adam: fp32 master 4 + 8-bit m 1 + 8-bit v 1 = 6
    (dict(ZERO_PAPER, optimizer="adam-8bit"), (2, 2, 6)),
    # Adam with bf16 moments (DeepSeek-V3 §3.3.3): fp32 master 4 + m 2 + v 2 = 8
    (dict(ZERO_PAPER, optimizer="adam-bf16"), (2, 2, 8)),
    (dict(grad_dtype="fp32"), (2, 4, 12)),
    # Megatron: fp32 main grads: 2 + 4 + 12 = 18 (theoretical_memory_usage.py)
    (dict(convention="megatron"), (2, 4, 12)),
    # fp8 (Transformer Engine) keeps the bf16 primary weight: still 2 (+ a separate fp8 cache);
    # the deepspeed stack's recipe keeps bf16 primaries (fp8.primary_weights false)
    (dict(ZERO_PAPER, dtype="fp8", stack="deepspeed"), (2, 2, 12)),
])
def test_bytes_per_param(kw, expected):
    b = M.bytes_per_param(Settings(**kw))
    assert (b.weights, b.gradients, b.optimizer) == expected
    assert b.fp8_cache == (2.0 if kw.get("dtype") == "fp8" else 0.0)  # TE fp8 copy + transpose, 1 + 1


def test_fp8_primary_weights_replace_the_bf16_copy():
    # megatron-core's recipe (--fp8-param-gather): the fp8 weight + transpose (1 + 1 = 2 B) are the
    # primary linear weights, so the cache replaces the 2-byte bf16 copy: 2 - 2 = 0 extra bytes per
    # linear parameter (non-linear parameters keep their 2 bf16 bytes in `weights`)
    b = M.bytes_per_param(Settings(dtype="fp8"))
    assert (b.weights, b.fp8_cache) == (2.0, 0.0)


def test_deepspeed_bytes_depend_on_stage():
    # DeepSpeed's 18 = 2 grads16 + 4 grads32 + 4 params32 + 8 optimizer (ZeRO-2); ZeRO-3 18 = 2 + 4 + 12
    b = M.bytes_per_param(Settings(convention="deepspeed"), np.array([2, 3]))
    assert list(b.gradients) == [6.0, 4.0] and b.weights == 2 and b.optimizer == 12


# ========================================================================= ZeRO (bare counts)

def test_zero_figure1_7_5b_on_64():
    # ZeRO paper Fig. 1 / docs/architecture.md: Ψ = 7.5B, N = 64 -> 120, 31.4, 16.6, 1.9 GB for stages 0..3
    # stage 0: 16Ψ = 120 GB; 1: (4 + 12/64)Ψ = 31.41; 2: (2 + 14/64)Ψ = 16.64; 3: 16Ψ/64 = 1.875
    got = [states(7.5e9, dp=64, zero=z, **ZERO_PAPER)[0] / 1e9 for z in range(4)]
    assert got == pytest.approx([120.0, 31.40625, 16.640625, 1.875], rel=1e-12)
    assert [round(g, 1) for g in got] == [120.0, 31.4, 16.6, 1.9]


# ZeRO paper (Rajbhandari et al. 2019) Table 1, 7.5B rows, printed precision (GB):
# P_os = (4 + 12/N)Ψ, P_os+g = (2 + 14/N)Ψ, P_os+g+p = 16Ψ/N
ZERO_TABLE1_7_5B = {
    1: {1: 120, 4: 52.5, 16: 35.6, 64: 31.4, 256: 30.4, 1024: 30.1},
    2: {1: 120, 4: 41.3, 16: 21.6, 64: 16.6, 256: 15.4, 1024: 15.1},
    3: {1: 120, 4: 30, 16: 7.5, 64: 1.88, 256: 0.47, 1024: 0.12},
}


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 4, 16, 64, 256, 1024])
def test_zero_table1(zero, n):
    printed = ZERO_TABLE1_7_5B[zero][n]
    got = states(7.5e9, dp=n, zero=zero, **ZERO_PAPER)[0] / 1e9
    decimals = len(str(printed).split(".")[1]) if "." in str(printed) else 0
    # the paper rounds half up (41.25 -> 41.3; 15.41 -> 15.4): compare at its printed precision
    assert abs(got - printed) <= 0.5 * 10 ** -decimals + 1e-9, (zero, n, got, printed)


@pytest.mark.skipif(not (SHARED / "validation" / "public.yaml").exists(), reason="shared validation data absent")
def test_zero_table1_against_public_yaml():
    rows = yaml.safe_load((SHARED / "validation" / "public.yaml").read_text())["zero2019_memory"][
        "table1_model_state_memory_per_device_gb"]["rows"]
    stage = {"Pos": 1, "Pos+g": 2, "Pos+g+p": 3}
    size = {"7.5B": 7.5e9, "128B": 128e9, "1T": 1e12}
    checked = 0
    for row in rows:
        got = states(size[row["model"]], dp=row["dp_degree"], zero=stage[row["stage"]], **ZERO_PAPER)[0] / 1e9
        printed = float(row["memory_gb"])
        # the table prints 2-4 significant figures: within 0.5 % or half a unit of the last printed digit
        assert got == pytest.approx(printed, rel=5e-3, abs=0.006), row
        checked += 1
    assert checked >= 54


def test_seed_004_zero3_70b_on_8_is_140_not_280():
    # 70B x 16 B = 1.12 TB of states; ZeRO-3 over 8 GPUs: 1.12e12 / 8 = 140 GB (seed 004 says ~280)
    assert states(70e9, zero=0, **ZERO_PAPER)[0] == pytest.approx(1.12e12, rel=1e-12)
    assert states(70e9, dp=8, zero=3, **ZERO_PAPER)[0] == pytest.approx(140e9, rel=1e-12)
    # seed 004's "TP=2 + ZeRO-2": 8 GPUs, tp=2, dp=4, 16 B/param: 35e9 x (2 + 14/4) = 192.5 GB (docs/architecture.md)
    assert states(70e9, tp=2, dp=4, zero=2, **ZERO_PAPER)[0] == pytest.approx(192.5e9, rel=1e-12)
    # the same with the default stack's fp32 main grads (18 B/param): 35e9 x (2 + 4/4 + 12/4) = 210 GB
    assert states(70e9, tp=2, dp=4, zero=2)[0] == pytest.approx(210e9, rel=1e-12)


def test_megatron_convention_bare():
    # Megatron theoretical_memory_usage.py: 18 B/param, or 6 + 12/d with the distributed optimizer
    assert states(10e9, dp=8, zero=0, convention="megatron")[0] == pytest.approx(18 * 10e9)
    assert states(10e9, dp=8, zero=1, convention="megatron")[0] == pytest.approx((6 + 12 / 8) * 10e9)
    assert states(10e9, dp=8, cp=2, zero=1, convention="megatron")[0] == pytest.approx((6 + 12 / 16) * 10e9)


def test_deepspeed_convention_bare():
    # DeepSpeed estimate_zero2: 2Ψ + 18Ψ/N; estimate_zero3: 4·largest + 18Ψ/N (largest unknown: 0)
    assert states(7.5e9, dp=64, zero=2, convention="deepspeed")[0] == pytest.approx(2 * 7.5e9 + 18 * 7.5e9 / 64)
    assert states(7.5e9, dp=64, zero=3, convention="deepspeed")[0] == pytest.approx(18 * 7.5e9 / 64)


@pytest.mark.parametrize("conv,zero", [("megatron", 2), ("megatron", 3), ("deepspeed", 0), ("deepspeed", 1)])
def test_convention_pairs_rejected(conv, zero):
    with pytest.raises(UserError, match=conv):
        M.check_convention(Settings(convention=conv), zero)
    assert not M.convention_allows(Settings(convention=conv), zero)


def test_convention_mask_is_array_friendly():
    z = np.arange(4)
    assert list(M.convention_allows(Settings(convention="megatron"), z)) == [True, True, False, False]
    assert list(M.convention_allows(Settings(convention="deepspeed"), z)) == [False, False, True, True]
    assert list(M.convention_allows(Settings(), z)) == [True] * 4


# ===================================================================== sharding (Megatron TP/PP)

def test_llama_layer_shard_tp8():
    # Llama-3-70B layer: attention 2·h² + 2·h·kv·d = 2·8192² + 2·8192·1024 = 150,994,944;
    # SwiGLU 3·h·f = 3·8192·28672 = 704,643,072; two RMSNorms 2h = 16,384 (replicated over TP).
    # tp = 8: (150,994,944 + 704,643,072)/8 + 16,384 = 106,971,136
    s = M.layer_shard(LLAMA70, Parallel(tp=8))
    assert s.dense == pytest.approx(106_971_136)
    assert s.experts == 0


def test_gpt_row_biases_replicated():
    # GPT 22B (h = 6144, biases): attention 4h² + 4h, MLP 8h² + 5h, norms 4h; under TP the output
    # and FC2 biases (h each) are replicated: (4h² + 3h + 8h² + 4h)/t + 2h + 4h
    h, t = 6144, 4
    s = M.layer_shard(GPT22, Parallel(tp=t))
    assert s.dense == pytest.approx((12 * h * h + 7 * h) / t + 6 * h)
    assert M.layer_shard(GPT22, Parallel(tp=1)).dense == P.dense_layer_params(GPT22)


def test_embedding_and_head_placement():
    # Llama-3-70B untied, pp = 1: embedding V·h/t and head V·h/t + final norm on the one stage
    V, h = 128256, 8192
    r = M.memory_per_gpu(LLAMA70, HW, Parallel(tp=8, seq=4096), Settings())
    assert r["params_per_gpu"] == pytest.approx(80 * 106_971_136 + 2 * V * h / 8 + h)
    # tied GPT 22B: counted once with pp = 1, and on both ends with pp > 1 (Megatron's copy)
    V, h = 51200, 6144
    assert SH.head_shard(GPT22, Parallel(tp=2, pp=1)) == 2 * h            # final LayerNorm only
    assert SH.head_shard(GPT22, Parallel(tp=2, pp=2)) == V * h / 2 + 2 * h
    # learned positions (2048 x h) are replicated over TP, the word embedding split
    assert SH.embedding_shard(GPT22, Parallel(tp=2)) == V * h / 2 + 2048 * h


def test_megatron_convention_llama_tp8_pp2():
    # Megatron theoretical_memory_usage.py, Llama-3-70B, tp 8, pp 2, untied, no distributed optimizer:
    # block = 80 x 855,654,400 + 8192 (final norm) = 68,452,360,192; most-loaded shard =
    # (block/2 + V·h)/8 = (34,226,180,096 + 1,050,673,152)/8 = 4,409,606,656 params x 18 B.
    megatron_formula = 4_409_606_656 * 18
    r = M.memory_per_gpu(LLAMA70, HW, Parallel(tp=8, pp=2, microbatches=8, sp=True), Settings(convention="megatron"))
    states_ = r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"]
    # llmpar replicates the norms over TP (Megatron's formula divides them by t): stage 0 holds
    # 40 x 106,971,136 + V·h/8 = 4,410,179,584 params, 572,928 more (1.3e-4 relative)
    assert r["params_per_gpu"] == 4_410_179_584
    assert states_ == pytest.approx(18 * 4_410_179_584)
    assert states_ == pytest.approx(megatron_formula, rel=2e-4)


def test_deepspeed_zero3_llama_dp8():
    # estimate_zero3: 4 x largest layer (embedding 128256 x 8192 = 1,050,673,152) + 18Ψ/8,
    # Ψ = 70,553,706,496: 4,202,692,608 + 158,745,839,616 = 162,948,532,224
    r = M.memory_per_gpu(LLAMA70, HW, Parallel(dp=8, zero=3, seq=2048), Settings(convention="deepspeed"))
    assert r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"] == pytest.approx(162_948_532_224)
    # estimate_zero2: 2Ψ + 18Ψ/8
    r = M.memory_per_gpu(LLAMA70, HW, Parallel(dp=8, zero=2, seq=2048), Settings(convention="deepspeed"))
    assert r["weights_bytes"] + r["gradients_bytes"] + r["optimizer_bytes"] == pytest.approx(
        2 * 70_553_706_496 + 18 * 70_553_706_496 / 8)


def test_zero_over_dp_times_cp_and_zero3_buffer():
    # ZeRO-1 shards the 12 B of Adam over dp·cp = 4·2 = 8 (Megatron's data-parallel-with-CP group)
    par = Parallel(tp=8, dp=4, cp=2, zero=1, seq=8192, sp=True)
    r = M.memory_per_gpu(LLAMA70, HW, par, Settings())
    psi = r["params_per_gpu"]
    assert r["optimizer_bytes"] == pytest.approx(12 * psi / 8)
    # the default stack (megatron-core) keeps fp32 main grads, unsharded under ZeRO-1: 4Ψ
    assert r["weights_bytes"] == pytest.approx(2 * psi) and r["gradients_bytes"] == pytest.approx(4 * psi)
    # ZeRO-3 (llmpar): 2Ψ/N + two gathered layers (2 x 2 B x 106,971,136) ; fp32 grads 4Ψ/N + one layer (4 B)
    r3 = M.memory_per_gpu(LLAMA70, HW, par.replace(zero=3), Settings())
    assert r3["weights_bytes"] == pytest.approx(2 * psi / 8 + 4 * 106_971_136)
    assert r3["gradients_bytes"] == pytest.approx(4 * psi / 8 + 4 * 106_971_136)


def test_expert_sharding_mixtral():
    # Mixtral expert: 3·4096·14336 = 176,160,768; 8 per layer; ep = 8, tp = 1: one expert per GPU.
    # Expert-data-parallel group = dp·cp/ep = 16/8 = 2: ZeRO-1 divides experts' Adam state by 2,
    # the rest (attention 2·4096² + 2·4096·1024 = 41,943,040, router 4096·8, norms 8192) by 16.
    par = Parallel(dp=16, ep=8, zero=1, seq=4096)
    s = M.layer_shard(MIXTRAL, par)
    assert s.experts == pytest.approx(176_160_768)
    assert s.moe == pytest.approx(41_943_040 + 32_768 + 8_192)
    r = M.memory_per_gpu(MIXTRAL, HW, par, Settings())
    emb = head = 32000 * 4096
    ne = 32 * (41_943_040 + 32_768 + 8_192) + emb + head + 4096
    ex = 32 * 176_160_768
    assert r["optimizer_bytes"] == pytest.approx(12 * (ne / 16 + ex / 2))


def test_fp8_weight_cache():
    # fp8: bf16 primary weights (2 B) + fp8 copy and transpose (2 B) of the linear weights:
    # Llama-3-70B tp 8 layer linears (150,994,944 + 704,643,072)/8 = 106,954,752 per layer
    # (the deepspeed stack's fp8 recipe keeps bf16 primaries; megatron-core's makes the fp8 copies
    # the primaries: test_fp8_primary_weights_replace_the_bf16_copy)
    r16 = M.memory_per_gpu(LLAMA70, HW, Parallel(tp=8, seq=4096, sp=True), Settings(stack="deepspeed"))
    r8 = M.memory_per_gpu(LLAMA70, HW, Parallel(tp=8, seq=4096, sp=True), Settings(dtype="fp8", stack="deepspeed"))
    assert r8["weights_bytes"] - r16["weights_bytes"] == pytest.approx(2 * 80 * 106_954_752)
    # and the saved GEMM inputs drop to 1 byte: QKV input, attention output, MLP input, SwiGLU
    # output: (h + a·d + h + f)·s·b per layer (÷ t or ÷ t_sp, all ÷ 8 here) = (3·8192 + 28672)·4096/8
    d = r16["activation_bytes_per_layer"] - r8["activation_bytes_per_layer"]
    assert d == pytest.approx((3 * 8192 + 28672) * 4096 / 8)


# ================================================================================ activations

def korthikanti(s, b, h, a, t, row):
    """Korthikanti et al. 2022 Table 2 as printed (bytes per layer)."""
    return {
        "none": s * b * h * (34 + 5 * a * s / h),
        "tp": s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
        "tp_sp": s * b * h * (34 / t + 5 * a * s / (h * t)),
        "tp_sel": s * b * h * (10 + 24 / t),
        "tp_sp_sel": s * b * h * 34 / t,
        "full": s * b * h * 2,
    }[row]


ROWS = [("none", 1, False, 0), ("tp", 8, False, 0), ("tp_sp", 8, True, 0), ("tp_sel", 8, False, 1),
        ("tp_sp_sel", 8, True, 1), ("full", 8, False, 2)]


@pytest.mark.parametrize("row,t,sp,rec", ROWS)
@pytest.mark.parametrize("name,b", [("megatron-gpt-22b", 1), ("gpt3-175b", 4), ("megatron-gpt-1t", 2)])
def test_korthikanti_table2_exact(name, b, row, t, sp, rec):
    m = load_model(name)
    s = m.max_seq  # 2048 for the paper-era GPT models
    coeffs = M.aggregate(M.activation_terms(m, False, "standard"), M.checkpoint_term(m))
    got, _ = M.layer_activation_bytes(coeffs, Parallel(tp=t, sp=sp, recompute=rec, seq=s, micro_batch=b))
    assert got == pytest.approx(korthikanti(s, b, m.hidden, m.heads, t, row), rel=1e-12)


def test_gpt3_attention_ratio():
    # Korthikanti §4.1: for GPT-3, 5as/h = 5·96·2048/12288 = 80: the s² terms are 80 of 114 sbh
    m = load_model("gpt3-175b")
    terms = M.activation_terms(m, False, "standard")
    s2 = sum(t.per_token for t in terms if t.s2) * m.max_seq
    rest = sum(t.per_token for t in terms if not t.s2)
    assert s2 / m.hidden == 80 and rest / m.hidden == 34


def test_llama_block_by_hand():
    # Llama-3-70B (h 8192, 64 heads x 128, 8 KV heads, f 28672, flash, no dropout), bytes/token:
    # 2 norm inputs 2·2h, QKV input 2h, MLP input 2h: 4·2·8192 = 65,536
    # Q 2·8192 = 16,384; K, V 2·1024 each = 4,096; logsumexp 4·64 = 256; attention output 16,384
    # SwiGLU: gate+up 4f = 114,688, product 2f = 57,344
    # total 65,536 + 16,384 + 4,096 + 256 + 16,384 + 172,032 = 274,688 B/token
    coeffs = M.aggregate(M.activation_terms(LLAMA70, False, "flash"), M.checkpoint_term(LLAMA70))
    got, _ = M.layer_activation_bytes(coeffs, Parallel(seq=8192))
    assert got == 274_688 * 8192
    # tp = 8 with SP: everything ÷ 8 (34,336 B/token)
    got, _ = M.layer_activation_bytes(coeffs, Parallel(tp=8, sp=True, seq=8192))
    assert got == 34_336 * 8192
    # without SP only the TP-split terms shrink: 65,536 + 209,152/8 = 91,680 B/token
    got, _ = M.layer_activation_bytes(coeffs, Parallel(tp=8, sp=False, seq=8192))
    assert got == 91_680 * 8192
    # no dropout and flash: no s² term and no dropout masks at all
    names = [t.name for t in M.activation_terms(LLAMA70, False, "flash")]
    assert not any("dropout" in n for n in names) and not any(t.s2 for t in M.activation_terms(LLAMA70, False, "flash"))


def test_standard_attention_keeps_s2_terms():
    # --attention standard on Llama: + softmax output 2·a·s per token (no dropout), − logsumexp 4a
    c_std = M.aggregate(M.activation_terms(LLAMA70, False, "standard"), M.checkpoint_term(LLAMA70))
    c_fl = M.aggregate(M.activation_terms(LLAMA70, False, "flash"), M.checkpoint_term(LLAMA70))
    s = 4096
    a, _ = M.layer_activation_bytes(c_std, Parallel(seq=s))
    f, _ = M.layer_activation_bytes(c_fl, Parallel(seq=s))
    assert a - f == s * (2 * 64 * s - 4 * 64)


def test_selective_recompute_drops_core_attention_only():
    # selective (Korthikanti §5) recomputes the attention core: with flash only the logsumexp goes
    coeffs = M.aggregate(M.activation_terms(LLAMA70, False, "flash"), M.checkpoint_term(LLAMA70))
    n, _ = M.layer_activation_bytes(coeffs, Parallel(seq=1024, recompute=0))
    s, _ = M.layer_activation_bytes(coeffs, Parallel(seq=1024, recompute=1))
    f, _ = M.layer_activation_bytes(coeffs, Parallel(seq=1024, recompute=2))
    assert n - s == 1024 * 4 * 64
    assert f == 1024 * 2 * 8192     # full: the layer input, 2sbh


def test_moe_block_by_hand():
    # Mixtral (h 4096, 32 heads x 128, 8 KV, 8 experts top-2, f_e 14336, flash), bytes/token:
    # norm1, QKV input, Q, attention output, norm2, router input: 6 x 2·4096 = 49,152
    # K, V 2·1024 each = 4,096; logsumexp 4·32 = 128; router probabilities fp32 4·8 = 32
    # expert inputs and outputs 2 x 2·2·4096 = 32,768; experts gate+up 2·2·2·14336 = 114,688,
    # product 2·2·14336 = 57,344.  Total 258,208
    coeffs = M.aggregate(M.activation_terms(MIXTRAL, True, "flash"), M.checkpoint_term(MIXTRAL))
    got, _ = M.layer_activation_bytes(coeffs, Parallel(seq=4096))
    assert got == 258_208 * 4096


def test_mla_block_by_hand():
    # DeepSeek-V3 dense layer (h 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128,
    # f 18432), bytes/token: norm1 + down-projection input 2·2·7168 = 28,672; q latent and its
    # normalised copy 2·2·1536 = 6,144; kv latent + rope key 2·576 = 1,152 and normalised 2·512 = 1,024;
    # Q and K 2·128·192 each = 98,304; V and attention output 2·128·128 each = 65,536;
    # logsumexp 4·128 = 512; norm2 + MLP input 28,672; SwiGLU 6·18432 = 110,592. Total 340,608
    coeffs = M.aggregate(M.activation_terms(DSV3, False, "flash"), M.checkpoint_term(DSV3))
    got, _ = M.layer_activation_bytes(coeffs, Parallel(seq=4096))
    assert got == 340_608 * 4096


def test_context_parallel_divides_sequence():
    # CP splits the sequence: per-token terms scale with s/c; s² terms with (s/c)·s
    coeffs = M.aggregate(M.activation_terms(GPT22, False, "standard"), M.checkpoint_term(GPT22))
    one, _ = M.layer_activation_bytes(coeffs, Parallel(seq=2048))
    two, _ = M.layer_activation_bytes(coeffs, Parallel(seq=2048, cp=2))
    assert two == pytest.approx(one / 2)


def test_logits_on_last_stage():
    # fp32 logits of a 128K vocabulary: 4·s·b·V/t = 4·8192·128256/8 = 525,336,576 B (vocab-parallel)
    par = Parallel(tp=8, sp=True, seq=8192)
    logits = [t for t in AE.last_stage_extra_terms(LLAMA70) if "logits" in t.name][0]
    assert M.term_bytes(logits, par) == 525_336_576


# ================================================================================= pipeline

def test_in_flight_per_stage():
    # stage 0 is pipeline.in_flight_microbatches (one formula, one place)
    for sched in (S1F1B, SGPIPE, SINTER, SZB, SDUAL):
        v = 2 if sched == SINTER else 1
        assert M.in_flight_on_stage(sched, 8, 32, v, 0) == in_flight_microbatches(sched, 8, 32, v)
    # 1F1B: stage i holds min(p - i, m); GPipe m everywhere
    assert [M.in_flight_on_stage(S1F1B, 4, 16, 1, i) for i in range(4)] == [4, 3, 2, 1]
    assert M.in_flight_on_stage(S1F1B, 4, 2, 1, 1) == 2
    assert M.in_flight_on_stage(SGPIPE, 4, 16, 1, 3) == 16
    # interleaved, Megatron warm-up 2(p-i-1) + (v-1)p chunks + 1, in micro-batches (÷ v):
    # p = 4, v = 2, stage 0: (6 + 4 + 1)/2 = 5.5 = 4·(1 + 3/8) (Korthikanti); stage 3: (0 + 4 + 1)/2 = 2.5
    assert M.in_flight_on_stage(SINTER, 4, 16, 2, 0) == 5.5
    assert M.in_flight_on_stage(SINTER, 4, 16, 2, 3) == 2.5
    # pp = 1: one micro-batch at a time whatever the schedule
    assert M.in_flight_on_stage(SGPIPE, 1, 16, 1, 0) == 1
    # arrays
    got = M.in_flight_on_stage(np.array([S1F1B, SGPIPE]), np.array([4, 4]), 16, 1, np.array([1, 1]))
    assert list(got) == [3, 16]


@pytest.mark.parametrize("L,p,first,mid,last", [
    (126, 16, 7, 8, 7),   # Llama 3 §3.3.2: first and last stage one layer short
    (80, 8, 10, 10, 10),
    (61, 16, 3, 4, 3),    # d = 64 - 61 = 3: last, first, then one middle stage short
    (5, 4, 1, 2, 1),
])
def test_stage_spans(L, p, first, mid, last):
    spans = [M.stage_span(L, p, i) for i in range(p)]
    assert spans[0] == (0, first) and spans[-1][1] == last and spans[1][1] == mid
    assert sum(n for _, n in spans) == L
    assert all(spans[i + 1][0] == spans[i][0] + spans[i][1] for i in range(p - 1))  # contiguous


def test_most_loaded_stage_405b():
    # 405B, 126 layers on 16 stages, 1F1B: stage 0 has 7 layers x 16 in flight = 112 layer-batches,
    # stage 1 8 x 15 = 120: stage 1 is the most loaded (activations dominate)
    par = Parallel(tp=8, pp=16, dp=8, zero=1, sp=True, seq=8192, microbatches=64)
    r = M.memory_per_gpu(load_model("llama-3.1-405b"), HW, par, Settings())
    assert r["stage"] == 1
    stages = M.memory_per_stage(load_model("llama-3.1-405b"), HW, par, Settings())
    assert max(s["total_bytes"] for s in stages) == pytest.approx(r["total_bytes"])
    assert [s["layers"] for s in stages] == [7] + [8] * 14 + [7]


def test_deepseek_dense_layers_on_first_stage():
    # DeepSeek-V3 layers 0-2 are dense: with pp = 16 the first stage (3 layers) has no experts
    par = Parallel(pp=16, dp=64, ep=64, zero=1, seq=4096, microbatches=32)
    st = M.memory_per_stage(DSV3, HW, par, Settings())
    assert st[0]["layers"] == 3
    assert st[0]["params_per_gpu"] == pytest.approx(3 * P.dense_layer_params(DSV3) + P.embedding_params(DSV3))


def test_dualpipe_holds_two_stages():
    # DeepSeek-V3 Table 2: DualPipe keeps 2x parameters; device 0 holds stages 0 and p-1
    par = Parallel(tp=8, pp=4, dp=1, sp=True, seq=4096, microbatches=8, schedule=SDUAL)
    one = M.memory_per_stage(LLAMA70, HW, par.replace(schedule=S1F1B), Settings())
    two = M.memory_per_stage(LLAMA70, HW, par, Settings())
    assert two[0]["params_per_gpu"] == pytest.approx(one[0]["params_per_gpu"] + one[3]["params_per_gpu"])
    assert two[0]["in_flight"] == 5   # p + 1


# ================================================================================ inference

def test_kv_cache_gqa_and_mla():
    # Llama-3-70B: 2·kv·d·bytes/t = 2·8·128·2/8 = 512 B per token per layer per GPU
    assert M.kv_cache_per_token_layer(LLAMA70, Parallel(tp=8), "bf16") == 512
    # MLA caches (d_c + d_R) = 512 + 64 per token per layer, not split by TP (DeepSeek-V2 §2.1.2)
    assert M.kv_cache_per_token_layer(DSV3, Parallel(tp=8), "bf16") == 1152
    assert M.kv_cache_per_token_layer(DSV3, Parallel(tp=8), "fp8") == 576


def test_inference_llama70b():
    # tp 8: weights 2 B x (80 x 106,971,136 + 2 x 131,334,144 + 8192) = 2 x 8,820,359,168;
    # KV 2·80·8·128·8192·B·2/8 = 335,544,320·B for B sequences of 8192 tokens
    r = M.inference_memory_per_gpu(LLAMA70, HW, Parallel(tp=8, seq=8192), Settings(), 4, 8192)
    assert r["weights_bytes"] == pytest.approx(2 * 8_820_359_168)
    assert r["kv_cache_bytes"] == pytest.approx(4 * 335_544_320)
    assert r["gradients_bytes"] == 0 and r["optimizer_bytes"] == 0
    # the largest batch that fits really fits, and one more does not
    bmax = int(r["max_micro_batch"])
    ok = M.inference_memory_per_gpu(LLAMA70, HW, Parallel(tp=8, seq=8192), Settings(), bmax, 8192)
    over = M.inference_memory_per_gpu(LLAMA70, HW, Parallel(tp=8, seq=8192), Settings(), bmax + 1, 8192)
    assert ok["fits"] and not over["fits"]


# ========================================================================== fit and arrays

@pytest.mark.parametrize("model,par", [
    (LLAMA70, Parallel(tp=8, pp=2, dp=4, zero=1, sp=True, recompute=1, seq=8192, microbatches=16)),
    (GPT22, Parallel(tp=8, sp=True, seq=2048, recompute=0)),
    (MIXTRAL, Parallel(tp=2, dp=8, ep=8, zero=1, sp=True, seq=4096)),
])
def test_max_micro_batch_is_the_largest_that_fits(model, par):
    s = Settings(attention=model.attention)
    r = M.memory_per_gpu(model, HW, par, s)
    bmax = int(r["max_micro_batch"])
    assert bmax >= 1
    assert M.memory_per_gpu(model, HW, par.replace(micro_batch=bmax), s)["fits"]
    assert not M.memory_per_gpu(model, HW, par.replace(micro_batch=bmax + 1), s)["fits"]


def test_runtime_allocator_and_reserve_override():
    # megatron-core (docs/stacks.md): overhead 0.03 (expandable segments), context 0.6 GiB, NCCL 0.25 GiB per communicator.
    # tp=8, pp=2, dp=4 (64 GPUs): tp, pp, dp, world + the embedding group on the first/last stage = 5
    par = Parallel(tp=8, pp=2, dp=4, zero=1, sp=True, seq=8192, microbatches=16)
    a = M.memory_per_gpu(LLAMA70, HW, par, Settings())
    assert a["communicators"] == 5
    assert a["runtime_bytes"] == pytest.approx(0.6 * GIB + 5 * 0.25 * GIB)
    assert a["reserved_bytes"] == pytest.approx(1.03 * a["allocated_bytes"])
    assert a["total_bytes"] == pytest.approx(a["reserved_bytes"] + a["runtime_bytes"])
    assert a["margin_bytes"] == pytest.approx(80 * GIB - a["total_bytes"])
    # --reserve replaces the runtime (context + NCCL) and leaves the allocator overhead alone
    b = M.memory_per_gpu(LLAMA70, HW, par, Settings(), reserve=10e9)
    assert b["runtime_bytes"] == 10e9 and b["reserved_bytes"] == a["reserved_bytes"]
    assert b["total_bytes"] - a["total_bytes"] == pytest.approx(10e9 - a["runtime_bytes"])
    assert a["capacity_bytes"] == 80 * 2**30


def test_arrays_match_scalars():
    # the planner's path: one call over arrays of candidates equals one call per candidate
    n = 12
    rng = np.random.default_rng(7)
    tp = rng.choice([1, 2, 4, 8], n)
    par = Parallel(tp=tp, pp=rng.choice([1, 2, 4, 8], n), dp=rng.choice([8, 16], n), ep=rng.choice([1, 2, 8], n),
                   zero=rng.choice([0, 1, 2, 3], n), sp=tp > 1, recompute=rng.choice([0, 1, 2], n),
                   micro_batch=rng.choice([1, 2], n), microbatches=rng.choice([8, 16], n), seq=4096,
                   schedule=rng.choice([S1F1B, SGPIPE, SZB], n))
    for model in (MIXTRAL, GPT22):
        s = Settings(attention=model.attention)
        vec = M.memory_per_gpu(model, HW, par, s)
        for i in range(n):
            one = M.memory_per_gpu(model, HW, par.take(i), s)
            for k in ("total_bytes", "activations_bytes", "params_per_gpu", "max_micro_batch", "stage"):
                assert vec[k][i] == pytest.approx(one[k], rel=1e-12), (model.name, i, k)


# ============================================================================ explain layer

@pytest.mark.parametrize("model,par,settings", [
    (LLAMA70, Parallel(tp=8, pp=2, dp=4, zero=3, sp=True, recompute=1, seq=8192, microbatches=16), Settings()),
    (GPT22, Parallel(tp=8, pp=4, sp=False, seq=2048, microbatches=8, schedule=SINTER, virtual_stages=2),
     Settings(attention="standard")),
    (MIXTRAL, Parallel(tp=2, dp=8, ep=4, zero=2, sp=True, seq=4096, recompute=2), Settings(dtype="fp8")),
    (LLAMA70, Parallel(dp=8, zero=3, seq=2048), Settings(convention="deepspeed")),
    (DSV3, Parallel(pp=4, dp=8, ep=8, zero=1, seq=4096, microbatches=8, schedule=SDUAL), Settings()),
])
def test_terms_add_up_to_the_core(model, par, settings):
    core = M.memory_per_gpu(model, HW, par, settings)
    from llmpar.cost.memory_explain import memory_terms

    terms = memory_terms(model, HW, par, settings)
    for comp in ("weights", "gradients", "optimizer", "activations"):
        total = sum(t.bytes for t in terms if t.component == comp)
        assert total == pytest.approx(core[f"{comp}_bytes"], rel=1e-9), comp
    assert sum(t.bytes for t in terms if t.component == "params") == pytest.approx(core["params_per_gpu"])
    assert all(t.formula and t.source for t in terms)


def test_tiny_model_spec_roundtrip():
    # a hand-made spec goes through the same path as a shipped one
    m = ModelSpec(name="tiny", layers=2, hidden=64, heads=4, ffn_hidden=256, ffn_type="gelu", vocab=100,
                  max_seq=128, norm="layernorm", linear_bias=True, dropout=True, attention="standard",
                  position="learned", family="gpt")
    # Korthikanti's accounting (stack megatron-2022: fp32 logits counted once, no runtime)
    r = M.memory_per_gpu(m, HW, Parallel(seq=128), Settings(attention="standard", stack="megatron-2022"))
    # activations: 2 layers x sbh(34 + 5as/h) = 2·128·64·(34 + 5·4·128/64) = 1,212,416
    # + token ids 8·128 + embedding dropout mask 128·64 + final LN input, head input 2·2·128·64
    # + fp32 logits 4·128·100 = 1,024 + 8,192 + 32,768 + 51,200
    assert r["activations_bytes"] == 1_212_416 + 1_024 + 8_192 + 32_768 + 51_200
    assert r["params_per_gpu"] == P.total_params(m)


def test_seed_000_zero1_and_ddp():
    # seed 000: DDP (4 + K)Ψ and ZeRO-1 (4 + K/N)Ψ; K = 12, Ψ = 70B, N = 8: 1120 GB and 385 GB
    assert states(70e9, dp=8, zero=0, **ZERO_PAPER)[0] == pytest.approx(1120e9)
    assert states(70e9, dp=8, zero=1, **ZERO_PAPER)[0] == pytest.approx(385e9)


def test_seed_inference_example_tp2():
    # docs/seeds.md: Llama-3-70B, bf16, tp = 2, B = 1, T = 4096
    h, f, V, L = 8192, 28672, 128256, 80
    attn, mlp = 2 * h * h + 2 * h * 1024, 3 * h * f
    params = L * ((attn + mlp) / 2 + 2 * h) + 2 * V * h / 2 + h          # both ends on the one stage
    kv_seq = 2 * L * 8 * 128 * 4096 * 2 / 2                               # 2·L·kv·d·T·bytes / t
    # working set per token: 4h + max((Q+K+V+O)·2/t, 6f/t) = 32,768 + max(18,432, 86,016)
    work = 4096 * (4 * h + 6 * f / 2)
    logits_seq = 4 * V / 2
    # stack megatron-2022 (no allocator overhead) and an explicit 4 GiB runtime reserve
    r = M.inference_memory_per_gpu(LLAMA70, HW, Parallel(tp=2), Settings(stack="megatron-2022", attention="flash"), 1,
                                   4096, 4 * 2**30)
    assert r["params_per_gpu"] == pytest.approx(params)
    assert r["weights_bytes"] == pytest.approx(2 * params)
    assert r["kv_cache_bytes"] == pytest.approx(kv_seq)
    assert r["activations_bytes"] == pytest.approx(work + logits_seq)
    fixed = 2 * params + work + 4 * 2**30                                 # + the explicit 4 GiB reserve
    assert r["max_micro_batch"] == (80 * 2**30 - fixed) // (kv_seq + logits_seq)


# ================================================================================ invariants

from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402


@hsettings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 5, 16]), dp=st.sampled_from([1, 2, 8, 64]),
       b=st.integers(1, 4), sched=st.sampled_from([S1F1B, SGPIPE, SZB, SDUAL]), m=st.sampled_from([1, 8, 32]))
def test_invariants(tp, pp, dp, b, sched, m):
    par = Parallel(tp=tp, pp=pp, dp=dp, sp=tp > 1, micro_batch=b, microbatches=m, seq=4096, schedule=sched)
    s = Settings()
    st_ = [M.memory_per_gpu(LLAMA70, HW, par.replace(zero=z), s) for z in range(4)]
    # each ZeRO stage shards more: model states never grow from one stage to the next, except by
    # ZeRO-3's gathered-layer buffers (two layers' 2-B weights and one layer's gradient in the
    # default stack's fp32: 2·2 + 4 = 8 B per layer parameter, below)
    states_ = [x["weights_bytes"] + x["gradients_bytes"] + x["optimizer_bytes"] for x in st_]
    assert states_[0] >= states_[1] >= states_[2]
    layer = float(M.layer_shard(LLAMA70, par).dense)
    assert states_[3] <= states_[2] + 8 * layer + 1
    # recompute none >= selective >= full (activations only)
    act = [M.memory_per_gpu(LLAMA70, HW, par.replace(recompute=r), s)["activations_bytes"] for r in range(3)]
    assert act[0] >= act[1] >= act[2] > 0
    # activations are linear in the micro-batch
    one = M.memory_per_gpu(LLAMA70, HW, par.replace(micro_batch=1), s)["activations_bytes"]
    assert st_[0]["activations_bytes"] == pytest.approx(b * one, rel=1e-12)
    # the stage reported is the largest of all stages (DualPipe: every device)
    stages = M.memory_per_stage(LLAMA70, HW, par, s)
    assert st_[0]["total_bytes"] == pytest.approx(max(x["total_bytes"] for x in stages), rel=1e-12)


def test_fp8_bf16_boundary_layers_keep_no_fp8_copies():
    # Megatron-Core --first-last-layers-bf16: those layers run in BF16 and keep no FP8 weight
    # copies. A stack whose FP8 copies come beside the 16-bit weights (kernels.fp8
    # weight_copy_bytes_per_param 2, primary_weights false: deepspeed) saves 2 B per linear
    # parameter of each such layer. Llama-3 8B's layer: qkv 4096 x (4096 + 2 x 8 x 128) = 25,165,824,
    # proj 4096^2 = 16,777,216, SwiGLU 3 x 4096 x 14,336 = 176,160,768: 218,103,808 linear params.
    # pp 1: both layers on the GPU -> 2 x 218,103,808 x 2 B = 872,415,232 B less; pp 2: the first
    # layer on stage 0 (the most loaded here) -> 436,207,616 B. Primary FP8 weights (megatron-core:
    # the copies replace the 2-byte weight) keep 2 B either way: nothing changes.
    from llmpar.specs import load_stack

    hw, m = load_hardware("h100-sxm"), load_model("llama-3-8b")

    def with_bf16(stack):
        st = stack.model_copy(deep=True)
        st.kernels.fp8.bf16_layers_at_start = st.kernels.fp8.bf16_layers_at_end = 1
        return st

    for name, saved in (("deepspeed", {1: 872_415_232, 2: 436_207_616}), ("megatron-core", {1: 0, 2: 0})):
        base = load_stack(name)
        for pp in (1, 2):
            par = Parallel(tp=1, pp=pp, dp=8 // pp, micro_batch=1, microbatches=8, seq=8192)
            a = M.memory_per_gpu(m, hw, par, Settings(dtype="fp8", stack=base))
            b = M.memory_per_gpu(m, hw, par, Settings(dtype="fp8", stack=with_bf16(base)))
            assert int(a["stage"]) == int(b["stage"]) == 0
            assert float(a["weights_bytes"] - b["weights_bytes"]) == pytest.approx(saved[pp], abs=1)


def test_first_all_moe_middle_stage_by_hand():
    # DeepSeek-V3: 61 layers + 1 MTP block = 62 slots, layers 0-2 dense. At pp 32: c = ceil(62/32)
    # = 2, shortfall d = 64 - 62 = 2, first stage 2 - min(max(d - 1, 0), 1) = 1 layer, so stage 1
    # holds layers 1-2 (both dense) and stage 2, from layer 3, is the first all-MoE middle stage.
    # At pp 16 (c 4, d 2): the first stage holds 3 layers, 0-2, so stage 1 already starts at 3.
    from llmpar.cost.inflight import first_moe_middle_stage

    ds = load_model("deepseek-v3")
    assert int(first_moe_middle_stage(ds, 32)) == 2
    assert int(first_moe_middle_stage(ds, 16)) == 1
    assert first_moe_middle_stage(load_model("mixtral-8x7b"), 8) is None      # no dense prefix
    assert first_moe_middle_stage(load_model("llama-3-8b"), 8) is None         # dense model


@pytest.mark.parametrize("name, pp, ep, schedule", [
    ("deepseek-v3", 32, 8, "1f1b"), ("deepseek-v3", 16, 8, "interleaved"), ("deepseek-v3", 8, 32, "1f1b"),
    ("llama-3.1-405b", 16, 1, "interleaved"), ("mixtral-8x7b", 4, 8, "1f1b"),
])
def test_the_candidate_stages_hold_the_most_loaded_one(name, pp, ep, schedule):
    # every pipeline stage's total, evaluated one by one, never exceeds what memory_per_gpu reports
    # from its candidate stages (cost/inflight.candidate_stages): the candidates contain the maximum.
    # DeepSeek-V3 at pp 32 is the case the first all-MoE middle stage was added for (2026-12-02)
    from llmpar.cost.shards import layer_shard
    from llmpar.cost.states import bytes_per_param

    model = load_model(name)
    per_stage = -(-(model.layers + model.mtp_layers) // pp)
    v = 2 if schedule == "interleaved" and per_stage % 2 == 0 else 1
    par = Parallel(tp=1, pp=pp, dp=2048 // pp, cp=1, ep=ep, zero=1, micro_batch=1, microbatches=64,
                   seq=4096, schedule=SCHEDULES.index(schedule if v > 1 else "1f1b"), virtual_stages=v)
    settings = Settings(stack="megatron-core")
    hw = load_hardware("h800")
    got = float(M.memory_per_gpu(model, hw, par, settings)["total_bytes"])
    prec, shard, coeffs = bytes_per_param(settings, par.zero, par.microbatches), layer_shard(model, par), \
        MS._layer_coeffs(model, settings)
    common = MS._stage_common(model, par, coeffs, settings)
    _cap, res = RT._capacity(hw, None)
    every = [float(M._stage_totals(MS._stage_eval(model, par, settings, prec, shard, coeffs, s, common), settings,
                                   res)[3]) for s in range(pp)]
    assert got == pytest.approx(max(every), rel=1e-12)
