"""Serving cost model (docs/serving.md): numbers derived by hand beside each assertion."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmpar.cost import serving_load as load
from llmpar.cost.serving import experts_touched, iteration_terms, kv_bytes_per_token, weight_bytes_per_gpu
from llmpar.cost.serving_capacity import kv_capacity, max_concurrency
from llmpar.cost.serving_finite import finite_rate
from llmpar.specs.registry import load_engine, load_hardware, load_model

H100 = load_hardware("h100-sxm")
L8 = load_model("llama-3-8b")


def _engine(**kernels_overheads):
    e = load_engine("vllm")
    k = e.kernels.model_copy(update={k: v for k, v in kernels_overheads.items() if k in type(e.kernels).model_fields})
    o = e.overhead.model_copy(update={k: v for k, v in kernels_overheads.items() if k in type(e.overhead).model_fields})
    return e.model_copy(update={"kernels": k, "overhead": o})


# Llama-3-8B (models/llama-3-8b.yaml: h 4096, 32 layers, 32 heads, 8 KV heads, d_head 128, f 14336,
# vocab 128256, untied): attention 2*4096*4096 + 2*4096*1024 = 41,943,040 parameters per layer,
# SwiGLU 3*4096*14336 = 176,160,768; 32 layers x 218,103,808 = 6,979,321,856; LM head
# 128256*4096 = 525,336,576. In bf16 one decode iteration reads 2 x (6,979,321,856 + 525,336,576)
# = 15,009,316,864 bytes (the embedding is a gather, not read whole).
L8_DECODE_WEIGHT_BYTES = 15_009_316_864


def test_weight_bytes_of_a_decode_iteration():
    assert weight_bytes_per_gpu(L8, 1, 1, "bf16") == L8_DECODE_WEIGHT_BYTES
    # TP 2 halves every matrix: 7,504,658,432
    assert weight_bytes_per_gpu(L8, 2, 1, "bf16") == L8_DECODE_WEIGHT_BYTES / 2
    # fp8 linear layers (1 B) with the 16-bit head: 6,979,321,856 + 1,050,673,152 = 8,029,995,008
    assert weight_bytes_per_gpu(L8, 1, 1, "fp8") == 6_979_321_856 + 1_050_673_152


def test_decode_at_batch_1_and_64_from_bytes():
    """Batch 1 at 1,024 cached tokens, vLLM profile with decode_bandwidth 1 and no overheads.
    Achieved HBM bandwidth 3.35e12 x 0.89 (h100-sxm memory_efficiency) = 2.9815e12 B/s.
    weights: 15,009,316,864 / 2.9815e12 = 5.03415 ms (the FLOPs, 2 x 7.5e9, take 1.5 ms at
    989e12 x 0.803 x 1/(1 + 64) x 0.6432, the GEMM curve's shape term at one token: memory-bound;
    at 64 tokens 64/128 of the curve: 3.0 ms, still below the weights' 5.03 ms).
    KV: 2 x 8 heads x 128 x 2 B = 4,096 B per token per layer; 32 layers x 1,024 tokens read =
    134,217,728 B, plus the new token's 32 x 4,096 = 131,072 B written: 134,348,800 / 2.9815e12 =
    45.061 us. Batch 64 reads the same weights and 64x the KV cache: 64 x 134,217,728 + 64 x
    131,072 = 8,598,323,200 B = 2.88390 ms."""
    e = _engine(decode_bandwidth=1.0, per_step_s=0.0, per_seq_s=0.0)
    bw = 3.35e12 * 0.89
    t1 = iteration_terms(L8, H100, e, tp=1, decode=1, context=1024)
    assert t1["linear_s"] == pytest.approx(15_009_316_864 / bw, rel=1e-12)
    assert t1["linear_s"] == pytest.approx(5.03415e-3, rel=1e-5)
    assert t1["attention_s"] == pytest.approx(134_348_800 / bw, rel=1e-12)
    assert t1["overhead_s"] == 0 and t1["tp_s"] == 0
    t64 = iteration_terms(L8, H100, e, tp=1, decode=64, context=1024)
    assert t64["linear_s"] == pytest.approx(t1["linear_s"], rel=1e-12)   # still weight-bound at 64
    assert t64["attention_s"] == pytest.approx(8_598_323_200 / bw, rel=1e-12)
    assert t64["attention_s"] == pytest.approx(2.88390e-3, rel=1e-5)


def test_kv_bytes_per_token():
    # Llama-3-8B: 2 x 8 x 128 x 2 B = 4,096 B per layer; TP 2 holds 4 KV heads: 2,048; TP 16 > 8
    # KV heads replicates one head per GPU: 512 B (fp8: 256)
    assert kv_bytes_per_token(L8, "bf16", 1) == 4096
    assert kv_bytes_per_token(L8, "bf16", 2) == 2048
    assert kv_bytes_per_token(L8, "fp8", 16) == 256
    # DeepSeek-V3 MLA: (512 + 64) x 2 B = 1,152 B per layer on every TP rank
    assert kv_bytes_per_token(load_model("deepseek-v3"), "bf16", 8) == 1152


def test_experts_touched_occupancy():
    # E (1 - (1 - k/E)^N): Mixtral 8 experts, top-2: one token 2; two tokens 8 (1 - 0.75^2) = 3.5;
    # 64 tokens 8 (1 - 0.75^64) = 8 - 8 x 1.0054e-8
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert experts_touched(8, 2, 2) == pytest.approx(3.5)
    assert experts_touched(8, 2, 64) == pytest.approx(8 - 8 * 0.75**64, rel=1e-12)
    # DeepSeek-V3 256 experts, top-8, one token: 8
    assert experts_touched(256, 8, 1) == pytest.approx(8.0)


def test_kv_capacity_llama3_8b_h100_vllm():
    """vLLM: 0.9 x 80 GiB = 77,309,411,328 B for everything.
    weights held: 2 x (6,979,321,856 layers + 525,336,576 embedding + 525,336,576 head) = 16,059,990,016
    activations at 8,192 batched tokens: per token 4h + max(2 (q+k+v+o) = 20,480, 2 x 3f = 86,016)
    = 102,400 B -> 838,860,800; fp32 logits of 1,024 sequences 1,024 x 128,256 x 4 = 525,336,576
    -> 1,364,197,376. workspace 1.5 GiB = 1,610,612,736.
    pool = 77,309,411,328 - 16,059,990,016 - 1,364,197,376 - 1,610,612,736 = 58,274,611,200 B;
    per token 32 x 4,096 = 131,072 B -> 444,600.3 tokens -> 27,787 blocks of 16 = 444,592 tokens.
    At 1,024 + 128 tokens per request: floor(444,592 / 1,152) = 385 concurrent requests."""
    cap = kv_capacity(L8, H100, load_engine("vllm"), tp=1)
    assert cap["weights_bytes"] == 16_059_990_016
    assert cap["activations_bytes"] == 1_364_197_376
    assert cap["kv_pool_bytes"] == pytest.approx(58_274_611_200)
    assert cap["kv_tokens"] == 444_592
    assert max_concurrency(cap, L8, 1152) == 385


def test_free_rule_takes_a_share_of_what_is_free():
    """TRT-LLM's rule: pool = 0.9 x (HBM - weights - activations - workspace)."""
    e = load_engine("trtllm")
    cap = kv_capacity(L8, H100, e, tp=1)
    hbm = 80 * 2**30
    assert cap["kv_pool_bytes"] == pytest.approx(
        0.9 * (hbm - cap["weights_bytes"] - cap["activations_bytes"] - cap["workspace_bytes"]))


def test_queue_at_a_known_rate_obeys_littles_law():
    """Open loop at 5 requests/s of 1,024 / 128 tokens: the running count is λ x (engine time of a
    request): n = 5 x e2e_run, to the grid's precision (3 passes of 48 points: limit / 48^3)."""
    e = load_engine("vllm")
    dep = {"tp": 1, "pp": 1, "ep": 1, "weights": "bf16", "kv_dtype": "bf16"}
    r = load.open_loop(L8, H100, e, dep, 1024, 128, 5.0, 385, 8192)
    e2e_run = r["e2e_s"] - e.overhead.per_request_s
    assert r["running"] == pytest.approx(5.0 * e2e_run, abs=385 / 48**3 * 5)
    assert r["requests_per_s"] == 5.0 and not r["saturated"]
    assert r["output_tokens_per_s"] == pytest.approx(5.0 * 128)


def _ideal(mixed_prefill=True):
    """An engine whose every iteration takes T = 10 ms (infinite bandwidth and FLOPs, 10 ms per
    step): the mixed state at 1,024/128 tokens gives TTFT 15 ms, TPOT 10 ms, e2e 1.285 s
    (test_closed_loop_with_constant_iterations), so n running complete n / 1.285 requests/s.
    ``mixed_prefill`` False: prefills are iterations of their own (SGLang's default)."""
    e = _engine(decode_bandwidth=1.0, per_step_s=0.01, per_request_s=0.0, per_seq_s=0.0)
    e = e.model_copy(update={"scheduler": e.scheduler.model_copy(update={"mixed_prefill": mixed_prefill})})
    hw = H100.model_copy(update={"gpu": H100.gpu.model_copy(update={
        "memory_bandwidth": 1e30, "peak_flops": {k: 1e35 for k in H100.gpu.peak_flops}})})
    return e, hw, {"tp": 1, "pp": 1, "ep": 1, "weights": "bf16", "kv_dtype": "bf16"}


def test_closed_loop_with_constant_iterations():
    """With bandwidth and peak so high that only the fixed 10 ms per iteration counts, every
    iteration takes T = 10 ms. The steady mixed state (waves=False): TTFT = T/2 + 1 prefill
    iteration = 15 ms, TPOT = T, e2e = 15 ms +
    (128 - 1) x 10 ms = 1.285 s; C = 4 clients -> X = 4 / 1.285 = 3.1128 requests/s."""
    e, hw, dep = _ideal()
    r = load.closed_loop(L8, hw, e, dep, 1024, 128, 4, 385, 8192, waves=False)
    assert r["tpot_s"] == pytest.approx(0.01, rel=1e-6)
    assert r["ttft_s"] == pytest.approx(0.015, rel=1e-6)
    assert r["e2e_s"] == pytest.approx(1.285, rel=1e-6)
    assert r["requests_per_s"] == pytest.approx(4 / 1.285, rel=1e-6)
    # 8 clients with room for 4: the other 4 wait; C / X - e2e = 8 / 3.1128 - 1.285 = 1.285 s
    r8 = load.closed_loop(L8, hw, e, dep, 1024, 128, 8, 4, 8192, waves=False)
    assert r8["queue_s"] == pytest.approx(1.285, rel=1e-6)
    # in waves: 4 x 1,024 prompt tokens fit one 8,192-token iteration (k = 1): TTFT = T = 10 ms,
    # TPOT = T, e2e = 10 ms + 127 x 10 ms = 1.28 s, X = 4 / 1.28 = 3.125 requests/s
    w = load.closed_loop(L8, hw, e, dep, 1024, 128, 4, 385, 8192)
    assert (w["ttft_s"], w["tpot_s"], w["e2e_s"]) == pytest.approx((0.01, 0.01, 1.28), rel=1e-6)
    assert w["requests_per_s"] == pytest.approx(3.125, rel=1e-6)
    # 32 clients: 32 x 1,024 = 32,768 tokens; with the decodes of finished prompts sharing the
    # budget, k = ceil(32,768 / (8,192 - d_p)) = 5 (d_p = 32 x 4/10 = 12.8 -> 32,768 / 8,179.2 = 4.006);
    # in-engine TTFT = (5 + 1)/2 x 10 ms = 30 ms and e2e 30 ms + 127 x 10 ms = 1.30 s; a wave ends
    # after 5 x 10 ms + 127 x 10 ms = 1.32 s, so X = 32 / 1.32 = 24.24 requests/s and each client
    # waits C/X - 1.30 s = 20 ms before its prompt is taken: TTFT 50 ms; TPOT 10 ms
    w32 = load.closed_loop(L8, hw, e, dep, 1024, 128, 32, 385, 8192)
    assert w32["prefill_iterations"] == 5
    assert w32["requests_per_s"] == pytest.approx(32 / 1.32, rel=1e-6)
    assert w32["ttft_s"] == pytest.approx(0.05, rel=1e-6)
    assert w32["tpot_s"] == pytest.approx(0.01, rel=1e-6)


def test_an_offline_burst_of_long_prompts_is_one_wave():
    """N prompts submitted at once and all admitted share the prefill budget, however long each
    is: the wave holds (cost/serving_load.py offline). Constant 10 ms iterations (_ideal), 4
    prompts of 20,000 tokens, budget 8,192: k = ceil(80,000 / (8,192 - d_p)) = 10 (d_p = 4 x 9/20 =
    1.8 decodes sharing it), so the mean first token is (10 + 1)/2 x 10 ms = 55 ms, no slot wait
    (N <= the 385 slots), TPOT 10 ms. Until 2026-12-02 such prompts (one longer than the budget)
    took the steady mixed state, one prompt's own chunks (2.4 prefill iterations), as if nothing
    else were queued."""
    e, hw, dep = _ideal()
    r = load.offline(L8, hw, e, dep, 20000, 128, 4, 385, 8192)
    assert r["prefill_iterations"] == 10
    assert r["ttft_s"] == pytest.approx(0.055, rel=1e-6)
    assert r["tpot_s"] == pytest.approx(0.01, rel=1e-6)
    assert r["queue_s"] == pytest.approx(0.0, abs=1e-12)


def test_an_offline_burst_respects_the_compute_bound():
    """Physics, any engine: 50 prompts of 15,000 tokens at once on one TP-4 replica of Qwen3-32B
    (4 x H100). Its linear weights per layer: q 5,120 x 8,192 + k, v 2 x 5,120 x 1,024 + o 8,192 x
    5,120 + MLP 3 x 5,120 x 25,600 = 487.6 M, x 64 layers = 31.2 B, so prefill is at least
    2 x 31.2e9 FLOPs a token: 750,000 tokens = 4.68e16 FLOPs over 4 GPUs at 989 TFLOP/s = 11.8 s.
    The prompts share the iterations first come first served, so the mean first token comes after
    at least half of that: TTFT >= 5.9 s (it read 0.87 s before the burst was one wave)."""
    from llmpar.serving.run import serve

    out = serve(load_model("qwen3-32b"), H100, load_engine("vllm"), gpus=4, tp=4, isl=15000, osl=128,
                rate=math.inf, prompts=50)
    assert out["figures"]["ttft_s"] >= 5.9


def test_prefill_of_its_own_with_constant_iterations():
    """SGLang's default (enable_mixed_chunk off: scheduler.mixed_prefill false): a prefill batch is
    an iteration of its own and the decodes wait for it. Every iteration takes T = 10 ms (as above).
    Steady state, C = 4, I = 1,024, O = 128, budget 8,192: a prompt fits one prefill iteration
    (room = the whole budget), r = min(4/(127 + 1), 8,192/1,024) = 1/32 prompts per decode iteration,
    d = 127/32 = 3.96875 decoding, p̄ = r·I = 32 tokens, c = 1,024, φ = 32/1,024 = 1/32.
    Per decode step T + φ·T: TPOT = 10.3125 ms (mixed: 10 ms); k_p = (4 − 3.96875)/(1/32) = 1, so
    TTFT = t̄/2 + T = 5.15625 + 10 = 15.15625 ms; e2e = 15.15625 + 127 x 10.3125 = 1,324.84375 ms;
    X = min(4/1.32484375, r/t̄ = 3.0303) = 3.01921 requests/s. The median token gap is the
    decode-only iteration (φ < 1/2): 10 ms."""
    e, hw, dep = _ideal(mixed_prefill=False)
    r = load.closed_loop(L8, hw, e, dep, 1024, 128, 4, 385, 8192, waves=False)
    assert r["tpot_s"] == pytest.approx(0.0103125, rel=1e-6)
    assert r["itl_median_s"] == pytest.approx(0.01, rel=1e-6)
    assert r["ttft_s"] == pytest.approx(0.01515625, rel=1e-6)
    assert r["e2e_s"] == pytest.approx(1.32484375, rel=1e-6)
    assert r["requests_per_s"] == pytest.approx(4 / 1.32484375, rel=1e-6)
    # waves of 32 clients: the decodes wait for the wave's prefills (no budget shared with them):
    # k = ceil(32 x 1,024 / 8,192) = 4, in-engine TTFT (4 + 1)/2 x 10 ms = 25 ms, no decode step
    # inside the prefill phase, TPOT = 10 ms; a wave takes 4 x 10 ms + 127 x 10 ms = 1.31 s, so
    # X = 32/1.31 and each client waits 1.31 - 1.295 = 15 ms: TTFT 40 ms
    w32 = load.closed_loop(L8, hw, e, dep, 1024, 128, 32, 385, 8192)
    assert w32["prefill_iterations"] == 4
    assert w32["requests_per_s"] == pytest.approx(32 / 1.31, rel=1e-6)
    assert w32["ttft_s"] == pytest.approx(0.04, rel=1e-6)
    assert w32["tpot_s"] == pytest.approx(0.01, rel=1e-6) and w32["itl_median_s"] == pytest.approx(0.01, rel=1e-6)


def test_a_published_median_itl_is_compared_with_the_median_gap():
    """A row's ``itl_ms: {median: ...}`` (SGLang's bench_serving, vLLM's FP8-KV blog) is compared with
    llmpar's median token gap, ``{mean: ...}`` or a bare number with its mean (TPOT)."""
    from llmpar.serving.published import ServingRow, residuals, tpot_stat

    assert tpot_stat({"itl_ms": {"median": 13.6}}) == "median"
    assert tpot_stat({"itl_ms": {"mean": 13.6}}) == tpot_stat({"tpot_ms": 21.0}) == "mean"
    assert tpot_stat({"tpot_ms": {"mean": 20.0}, "itl_ms": {"median": 13.0}}) == "mean"   # TPOT first
    # a median TPOT is the median over requests of each one's mean gap: a mean, not a median gap
    assert tpot_stat({"tpot_ms": {"median": 20.0}}) == "mean"
    row = ServingRow(source="x", row="1", engine="vllm", model="llama-3-8b", hardware="h100-sxm", gpus=1, tp=1,
                     pp=1, ep=1, isl=1000, osl=100, load={"concurrency": 8}, weights="bf16", kv_dtype="bf16",
                     measured={"tpot_s": 0.012}, tpot_stat="median")
    pred = {"tpot_s": 0.015, "itl_median_s": 0.012}
    assert residuals(row, pred)["tpot"] == pytest.approx(0.0)        # log(0.012 / 0.012)
    row.tpot_stat = "mean"
    assert residuals(row, pred)["tpot"] == pytest.approx(math.log(0.012 / 0.015))


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), ctx=st.integers(1, 8000),
       model=st.sampled_from(["llama-3-8b", "llama-3-70b", "mixtral-8x7b", "qwen3-30b-a3b"]),
       weights=st.sampled_from(["bf16", "fp8", "int4"]))
def test_decode_never_beats_the_weight_read_bound(tp, ctx, model, weights):
    """Batch 1 decode reads at least the weights once at the datasheet bandwidth (no efficiency)."""
    m = load_model(model)
    t = iteration_terms(m, H100, load_engine("vllm"), tp=tp, decode=1, context=ctx, weights=weights)
    assert t["total_s"] >= t["weight_bytes"] / H100.gpu.memory_bandwidth


@settings(max_examples=30, deadline=None)
@given(C=st.integers(1, 2000), isl=st.integers(1, 4000), osl=st.integers(1, 2000),
       engine=st.sampled_from(["vllm", "sglang", "trtllm"]))
def test_throughput_never_above_the_compute_roofline(C, isl, osl, engine):
    """Tokens through the model per second (I + O - 1 per request: the first output token comes
    from the prompt's forward, the last one is never fed back) x 2 x active params <= the dense
    peak (no efficiency)."""
    from llmpar.cost.serving import linear_flops_per_token

    e = load_engine(engine)
    dep = {"tp": 1, "pp": 1, "ep": 1, "weights": "bf16", "kv_dtype": "bf16"}
    r = load.closed_loop(L8, H100, e, dep, isl, osl, C, 385, 8192)
    tokens_per_s = r["requests_per_s"] * (isl + osl - 1)   # the last output token needs no forward
    assert tokens_per_s * linear_flops_per_token(L8) <= H100.gpu.peak("bf16")
    assert math.isfinite(r["ttft_s"]) and r["ttft_s"] > 0


def test_speculative_decoding_tokens_per_step_and_tpot():
    """Leviathan et al. 2023 eq. 1: k = 3 drafts accepted with a = 0.7 emit
    E = (1 - 0.7^4) / (1 - 0.7) = 0.7599 / 0.3 = 2.5330 tokens per step; a = 1 emits k + 1.
    With every iteration at T = 10 ms plus the draft's 3 x 10 ms / 32 layers = 0.9375 ms, the mixed
    state's TPOT is 10.9375 ms / 2.5330 = 4.3180 ms."""
    assert load.accepted_per_step({"spec_tokens": 3, "acceptance": 0.7}) == pytest.approx(2.5330, abs=1e-4)
    assert load.accepted_per_step({"spec_tokens": 3, "acceptance": 1.0}) == 4
    assert load.accepted_per_step({}) == 1
    e, hw, dep = _ideal()
    dep.update(spec_tokens=3, acceptance=0.7)
    r = load.closed_loop(L8, hw, e, dep, 1024, 128, 4, 385, 8192, waves=False)
    assert r["tpot_s"] == pytest.approx(0.0109375 / 2.5330, rel=1e-3)


def test_prefix_cache_prefills_only_the_miss():
    """A hit share of 0.75 on 1,024-token prompts computes 256 tokens, attending after the 768
    cached ones: the prefill's linear FLOPs are a quarter of a full prompt's."""
    assert load._prompt({"prefix_hit": 0.75}, 1024) == (256, 768)
    e = load_engine("vllm")
    full = iteration_terms(L8, H100, e, tp=1, prefill=1024)
    miss = iteration_terms(L8, H100, e, tp=1, prefill=256, prefill_context=768)
    head = 2.0 * 4096 * 128256   # one sequence's logits, the same in both
    assert (miss["linear_flops"] - head) == pytest.approx((full["linear_flops"] - head) / 4, rel=1e-12)


def test_data_parallel_attention_kv_pool_and_traffic():
    """DeepSeek-V3 on 8 H200s. Under TP 8 every GPU holds MLA's latent cache of every sequence
    ((512 + 64) x 2 B x 61 layers = 70,272 B per token, replicated: DeepSeek-V2 §2.1.2), so the replica
    holds what one GPU's pool holds; with data-parallel attention each GPU holds only its own
    sequences: the replica holds 8 pools, each smaller by the attention weights it now keeps whole.
    The MoE layers then move tokens by all-to-all and nothing is all-reduced over TP."""
    from llmpar.cost.serving import resident_weight_bytes

    ds = load_model("deepseek-v3")
    h200 = load_hardware("h200")
    e = load_engine("sglang")
    tp = kv_capacity(ds, h200, e, tp=8, weights="fp8")
    dpa = kv_capacity(ds, h200, e, tp=8, weights="fp8", dp_attention=True)
    assert tp["kv_bytes_per_token"] == dpa["kv_bytes_per_token"] == 1152 * 61
    assert dpa["weights_bytes"] == pytest.approx(resident_weight_bytes(ds, 8, 1, "fp8", dense_tp=1))
    assert dpa["weights_bytes"] > tp["weights_bytes"]
    per_gpu = math.floor(dpa["kv_pool_bytes"] / (1152 * 61 * 1)) // 1   # sglang pages of 1 token
    assert dpa["kv_tokens"] == 8 * per_gpu
    assert tp["kv_tokens"] == math.floor(tp["kv_pool_bytes"] / (1152 * 61))
    t = iteration_terms(ds, h200, e, tp=8, weights="fp8", decode=64, context=2048, dp_attention=True)
    assert t["tp_s"] == 0 and t["ep_s"] > 0
    # each GPU reads the KV of its own 64 / 8 = 8 sequences: 8 x 2,048 x 70,272 B
    assert t["kv_read_bytes"] == pytest.approx(8 * 2048 * 1152 * 61)


def test_disaggregated_prefill_and_decode_by_hand():
    """Llama 3 70B, 8 H100s as 1 prefill + 3 decode replicas of TP 2, 4 requests/s of 2,048/256,
    fp8 weights (vLLM profile).
    KV transfer: 2 x (8 / 2) KV heads x 128 x 2 B = 2,048 B per token per layer per GPU, x 80 layers
    x 2,048 tokens = 335.5 MB over one 400 Gb/s NIC at 0.94: 335,544,320 / 47e9 = 7.139 ms.
    Prefill: M/D/1 (Pollaczek-Khinchine) wait rho s / (2 (1 - rho)). Decode: Little's law,
    running = lambda / 3 x (256 - 1) x TPOT per replica, to the grid's 1/48 of the limit."""
    from llmpar.cost.serving_disagg import disaggregated, kv_transfer_s

    L70 = load_model("llama-3-70b")
    e = load_engine("vllm")
    dep = {"tp": 2, "pp": 1, "ep": 1, "weights": "fp8", "kv_dtype": "bf16"}
    assert kv_transfer_s(L70, H100, dep, 2048) == pytest.approx(335_544_320 / 47e9, rel=1e-9)
    cap = kv_capacity(L70, H100, e, tp=2, weights="fp8")
    limit = max_concurrency(cap, L70, 2048 + 256)
    r = disaggregated(L70, H100, e, dep, 2048, 256, 4.0, 1, 3, limit, 8192)
    rho = r["prefill_utilization"]
    s = r["ttft_s"] - r["queue_s"] - r["kv_transfer_s"] - e.overhead.per_request_s
    assert r["queue_s"] == pytest.approx(rho * s / (2 * (1 - rho)), rel=1e-9)
    assert r["running"] / 3 == pytest.approx(4.0 / 3 * 255 * r["tpot_s"], abs=limit / 48 * 1.01)
    assert not r["saturated"] and r["output_tokens_per_s"] == pytest.approx(4.0 * 256)
    # a decode pool free of prefill chunks decodes faster than the co-located replica at the same load
    co = load.open_loop(L70, H100, e, dep, 2048, 256, 1.0, limit, 8192)
    assert r["tpot_s"] < co["tpot_s"]


def test_offline_wait_by_hand():
    """N requests submitted once to n slots completing X/s. In waves: W = ceil(N/n); mean wait
    (n/X)·[n(W-1)(W-2)/2 + (W-1)(N-(W-1)n)]/N. N = 500, n = 348, X = 16: W = 2, the second wave
    of 152 waits 348/16 = 21.75 s: 21.75 x 152 / 500 = 6.612 s. Staggered (a slot at a time):
    m(m+1)/(2NX), m = 152: 152 x 153 / 16,000 = 1.4535 s. N = 3n in waves: waits 0, n/X, 2n/X,
    mean n/X. N <= n: no wait."""
    assert load.offline_wait(500, 348, 16, True) == pytest.approx(6.612, rel=1e-9)
    assert load.offline_wait(500, 348, 16, False) == pytest.approx(1.4535, rel=1e-9)
    assert load.offline_wait(300, 100, 4, True) == pytest.approx(25.0, rel=1e-9)
    assert load.offline_wait(64, 100, 4, True) == 0 and load.offline_wait(64, 100, 4, False) == 0


def test_offline_waits_once_not_a_closed_loop_cycle():
    """400 prompts at once on 4 slots of the ideal engine (X = 4 / 1.285 = 3.1128/s; the prompts
    fit one 8,192-token iteration, so they run in waves: W = 100): mean wait (4/X)·[4·99·98/2 +
    99·4]/400 = 1.285 x 19,800 / 400 = 63.6075 s, TTFT = that + the wave's 10 ms in-engine TTFT
    (k = 1: (1 + 1)/2 x 10 ms). A closed loop of 400 clients would say C/X − e2e = 400 x 1.285/4
    − 1.28 = 127.22 s: each client there resubmits and waits a whole cycle."""
    e, hw, dep = _ideal()
    r = load.offline(L8, hw, e, dep, 1024, 128, 400, 4, 8192)
    assert r["queue_s"] == pytest.approx(1.28 * 19_800 / 400, rel=1e-6)   # wave = 1.28 s (k = 1)
    assert r["ttft_s"] == pytest.approx(1.28 * 19_800 / 400 + 0.01, rel=1e-6)
    c = load.closed_loop(L8, hw, e, dep, 1024, 128, 400, 4, 8192)
    assert c["queue_s"] == pytest.approx(400 / 4 * 1.28 - 1.28, rel=1e-6)


def test_a_finite_run_below_capacity_is_the_steady_state():
    """400 requests at 2/s on the ideal engine (capacity 385 / 1.285 = 300/s): every request sees
    TTFT 15 ms, TPOT 10 ms and e2e 1.285 s whatever runs beside it, and the run lasts until the last
    arrival (200 s) plus one request: X = 400 / 201.285 = 1.98723/s."""
    e, hw, dep = _ideal()
    r = finite_rate(L8, hw, e, dep, 1024, 128, 2.0, 400, 385, 8192)
    assert (r["ttft_s"], r["tpot_s"], r["e2e_s"]) == pytest.approx((0.015, 0.01, 1.285), rel=1e-6)
    # the fluid moves in 400 steps of the horizon (0.51 s here): the last arrival lands within one
    assert r["requests_per_s"] == pytest.approx(400 / 201.285, rel=2e-3)
    assert r["queue_s"] == pytest.approx(0.0, abs=1e-9) and not r["saturated"]


@pytest.mark.parametrize("tp,pp", [(4, 1), (4, 2), (2, 4)])
def test_an_open_loop_at_a_closed_loop_s_throughput_runs_its_clients(tp, pp):
    """Little's law both ways: C clients in the steady mixed state complete X(C) requests/s, so
    Poisson arrivals at X(C) keep C requests running (n solves n = λ·e2e(n)) at the same TPOT and
    e2e. Llama 3 70B, vLLM, 1,024/128 tokens, C = 32."""
    m, e, hw = load_model("llama-3-70b"), load_engine("vllm"), H100
    dep = {"tp": tp, "pp": pp, "ep": 1, "weights": "bf16", "kv_dtype": "bf16"}
    c = load.closed_loop(m, hw, e, dep, 1024, 128, 32, 1024, 8192, waves=False)
    o = load.open_loop(m, hw, e, dep, 1024, 128, c["requests_per_s"] * (1 - 1e-9), 1024, 8192)
    assert o["running"] == pytest.approx(32, rel=0.01)
    assert (o["tpot_s"], o["e2e_s"]) == pytest.approx((c["tpot_s"], c["e2e_s"]), rel=0.01)
    assert o["capacity_requests_per_s"] > c["requests_per_s"]


@pytest.mark.parametrize("pp", [2, 4])
def test_a_chunk_delays_a_pipeline_round_by_its_share(pp):
    """With pp micro-batches in flight a round (each micro-batch through every stage once, one
    token per sequence) is bound by the sum of its micro-batches' stage times, t/pp each: when one
    micro-batch carries a prompt chunk (t_pf through the pipeline) instead of decodes only (t_dec),
    the round takes (pp − 1)·t_dec/pp + t_pf/pp = t_dec + (t_pf − t_dec)/pp. The mean iteration is
    t̄ = (1 − φ)·t_dec + φ·(t_dec + (t_pf − t_dec)/pp), and the prompt's own prefill is t_pf: its
    micro-batch carries it whole. Until 2026-12-04 a chunk delayed the round by all of t_pf − t_dec
    (pp x too much): Llama 3 70B at tp 4 x pp 2 under Poisson arrivals at 95 % of what 32 clients
    complete then ran 57.6 requests at 55 ms TPOT where the clients' waves ran 32 at 23 ms, and the
    open loop's capacity (10.5/s) was below what 64 clients achieved (11.9/s)."""
    m, e, hw = load_model("llama-3-70b"), load_engine("vllm"), H100
    dep = {"tp": 2, "pp": pp, "ep": 1, "weights": "bf16", "kv_dtype": "bf16"}
    st = load._state(m, hw, e, dep, 1024, 128, 32.0, 8192)
    d, ctx, c = st["d"], 1024 + 64.0, 1024.0          # one prompt per chunk at this load (c = I)
    assert st["phi"] < 1.0
    t_dec = load._iter(m, hw, e, dep, d / pp, ctx, 0.0, 0.0, 0.0)["total_s"]
    t_pf = load._iter(m, hw, e, dep, d / pp, ctx, c, 0.0, 1.0, c)["total_s"]
    assert (st["t_dec"], st["t_pf"]) == pytest.approx((t_dec, t_pf), rel=1e-12)
    phi = st["phi"]
    assert st["t_bar"] == pytest.approx((1 - phi) * t_dec + phi * (t_dec + (t_pf - t_dec) / pp), rel=1e-12)
    assert t_pf > 2 * t_dec     # the chunk matters: the old charge would be visibly different


def test_a_finite_run_with_few_running_of_a_large_limit_is_the_steady_state():
    """TensorRT-LLM's 0.14 online table, Llama 3.1 8B on one H200, 467 prompt and 16 output tokens at
    32 requests/s (capacity ~71/s): about 5.4 requests run of a limit of 1,858 (the KV pool). Below
    capacity a finite run of N requests sees the steady state, whatever N: its TPOT is the open
    loop's and so is its batch while the run lasts (the first requests find the engine empty, so a
    little less). The steady figures are tabulated for the finite run on a grid of n; evenly spaced
    on [1, 1858] its first points were n = 1 and 39.7, and a run at 5.4 read their TPOTs averaged
    (19.6 ms against the steady 9.9 ms; the table measured 9 ms) and a batch averaged over the
    horizon's idle tail (1.7). Geometric in n, the points are 17 % apart."""
    e, hw = load_engine("trtllm"), load_hardware("h200")
    m = load_model("llama-3.1-8b")
    dep = {"tp": 1, "pp": 1, "ep": 1, "weights": "bf16", "kv_dtype": "bf16"}
    steady = load.open_loop(m, hw, e, dep, 467, 16, 32.0, 1858, 8192)
    for n in (500, 5000):
        r = finite_rate(m, hw, e, dep, 467, 16, 32.0, n, 1858, 8192)
        assert r["tpot_s"] == pytest.approx(steady["tpot_s"], rel=0.02)
        assert r["ttft_s"] == pytest.approx(steady["ttft_s"], rel=0.02)
        assert r["running"] == pytest.approx(steady["running"], rel=0.05)


def test_a_finite_run_above_capacity_has_a_finite_queue():
    """All 400 requests at once (λ = 10^6/s) on 4 slots: the fluid admits request j > 4 when the
    (j − 4)-th completion frees a slot, at (j − 4)/X with X = 4 / 1.285 = 3.1128/s, so the mean wait
    is (N − n)²/(2·N·X) = 396² / (800 x 3.1128) = 62.97 s (the fluid, not the waves: arrivals are a
    stream); the run ends at 396/X + 1.285 = 128.50 s. The steady open loop has no answer here
    (saturated); the finite run does."""
    e, hw, dep = _ideal()
    r = finite_rate(L8, hw, e, dep, 1024, 128, 1e6, 400, 4, 8192)
    X = 4 / 1.285
    assert r["queue_s"] == pytest.approx(396 ** 2 / (2 * 400 * X), rel=0.01)
    assert r["ttft_s"] == pytest.approx(396 ** 2 / (2 * 400 * X) + 0.015, rel=0.01)
    assert r["duration_s"] == pytest.approx(396 / X + 1.285, rel=0.01)
    assert r["saturated"] and math.isfinite(r["tpot_s"])


def test_serve_json_terms_add_up_to_each_iteration():
    """`serve --json` carries its breakdown's explained terms (as `step --json` does; `--explain`
    had added nothing to the JSON): each phase's terms sum to its total_s, each with a formula and
    a source."""
    import llmpar

    r = llmpar.serve("llama-3-70b", tp=4, concurrency=16)
    for phase in ("decode", "prefill"):
        terms = [t for t in r.terms if t["component"] == phase]
        assert len(terms) == 6 and all(t["formula"] and t["source"] for t in terms)
        assert sum(t["seconds"] for t in terms) == pytest.approx(r.breakdown[phase]["total_s"], rel=1e-12)


@pytest.mark.parametrize("gpus,tp,pp,clients", [(8, 4, 1, 1), (16, 4, 1, 1), (16, 4, 1, 3), (8, 4, 2, 1), (8, 2, 4, 1)])
def test_no_request_sees_its_first_token_before_its_prompt_is_prefilled(gpus, tp, pp, clients):
    """A request's TTFT includes its own prefill, whatever the replicas and micro-batches: one client
    on two replicas of tp 4 (Llama 3 70B, fp8, TensorRT-LLM, 1,024-token prompts) had read 37.9 ms
    against its 55.4 ms prefill alone (the fluid split the client over both replicas), and a lone
    prompt at pp 2 was halved over the micro-batches (a newcomer review, 2026-12-04). The prefill
    alone is serve's own breakdown term (one prompt, no decodes)."""
    import llmpar

    r = llmpar.serve("llama-3-70b", gpus=gpus, tp=tp, pp=pp, weights="fp8", engine="trtllm", concurrency=clients,
                     isl=1024, osl=128)
    assert r.ttft_s >= r.breakdown["prefill"]["total_s"]
    assert r.breakdown["decode_batch"] >= 1.0 / pp     # a busy replica's batch, not one spread over idle ones
    # Little's law over the busy clients, to the engine's per-request host cost (5.9 ms of ~0.7 s),
    # which the model counts in the first token's latency but not in the engine's cycle
    assert r.requests_per_s == pytest.approx(clients / r.e2e_s, rel=0.01)
