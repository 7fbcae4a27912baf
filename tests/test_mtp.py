"""Multi-token prediction (DeepSeek-V3 §2.2; model ``mtp_layers``) and DualPipe's two stages per
device (§3.2.1), against counts derived by hand beside each assertion."""

from __future__ import annotations

import json

import pytest

from llmpar import api
from llmpar.cost import params as P
from llmpar.cost import pipeline
from llmpar.cost.flops import forward_flops_per_sequence, head_flops, layer_forward_flops
from llmpar.cost.step import step_time
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_hardware, load_model, load_stack
from llmpar.specs.hf import load_hf_config


def test_module_parameters_by_hand():
    # layer 60 of DeepSeek-V3 (MoE): 256 experts x 3 x 7168 x 2048 = 11,274,289,152; shared expert
    # 44,040,192; router 256 x 7168 + 256 bias = 1,835,264; two norms 14,336; MLA attention
    # 7168·1536 + 1536 + 1536·128·192 + 7168·576 + 512 + 512·128·256 + 128·128·7168 = 187,107,328
    # -> 11,507,286,272. The module adds M (7168 x 14336) = 102,760,448 and 3 norms = 21,504.
    m = load_model("deepseek-v3-mtp")
    assert m.mtp_layers == 1 and P.layer_params(m, 60) == 11_507_286_272
    assert P.mtp_module_params(m) == 11_507_286_272 + 102_760_448 + 21_504 == 11_610_068_224
    # kept out of the total, as the report's 671B (the main model) keeps it out
    assert P.total_params(m) == P.total_params(load_model("deepseek-v3")) == 671_026_419_200


def test_hf_config_reads_the_module_count(tmp_path):
    from tests.test_hf import DEEPSEEK_V3

    f = tmp_path / "config.json"
    f.write_text(json.dumps(DEEPSEEK_V3))
    assert load_hf_config(f).mtp_layers == 1       # num_nextn_predict_layers


def test_split_counts_the_module_as_a_block_on_the_last_stage():
    # 61 blocks + 1 module = 62 slots on 16 stages: ceil = 4, shortfall 2, taken from the last then
    # the first stage (Llama 3 §3.3.2 convention): 3 + 14 x 4 + 3, the last holding 2 blocks + MTP
    assert int(pipeline.stage_layers(62, 16)) == 4
    assert int(pipeline.last_stage_layers(62, 16)) == 3 and int(pipeline.first_stage_layers(62, 16)) == 3
    # the last stage: without MTP blocks 58-60, with it 59, 60 and the module's block: 3 MoE blocks
    # either way, plus the module's projection and norms (2 x 7168^2 + 3 x 7168 = 102,781,952
    # parameters at tp 1) and its own logits (the last stage's logit terms twice)
    kw = dict(hardware="h800", gpus=2048, tp=1, pp=16, ep=64, zero=1, seq=4096, global_batch=15360, dtype="fp8",
              stack="hai-llm", per_stage=True)
    base = {s["stage"]: s for s in api.memory("deepseek-v3", **kw).stages}
    mtp = {s["stage"]: s for s in api.memory("deepseek-v3-mtp", **kw).stages}
    assert base[15]["layers"] == mtp[15]["layers"] == 3
    assert mtp[15]["params_per_gpu"] - base[15]["params_per_gpu"] == 102_781_952
    assert mtp[15]["activations_bytes"] > base[15]["activations_bytes"]
    # the other stages are the same (the module sits on the last)
    assert mtp[1]["params_per_gpu"] == base[1]["params_per_gpu"]


def test_flops_add_a_block_the_projection_and_the_head():
    # per sequence: + one MoE block forward + 2·(2h·h)·s + the head again
    m, base = load_model("deepseek-v3-mtp"), load_model("deepseek-v3")
    s = 4096
    extra = layer_forward_flops(base, 1, s, moe=True) + 4.0 * s * 7168 * 7168 + head_flops(base, 1, s)
    assert float(forward_flops_per_sequence(m, s)) == pytest.approx(float(forward_flops_per_sequence(base, s)) + extra)


def test_at_pp1_the_module_costs_a_block_and_its_ends():
    # pp = 1: compute grows by m x (one block's fwd + bwd + the module's projection and head passes)
    hw, st = load_hardware("h800"), Settings(dtype="bf16")
    par = Parallel(tp=8, pp=1, dp=1, ep=8, seq=4096, microbatches=4, sp=True)
    a = step_time(load_model("deepseek-v3"), hw, par, st, with_memory=False)
    b = step_time(load_model("deepseek-v3-mtp"), hw, par, st, with_memory=False)
    p = b["parts"]
    extra = 4 * (p["layer_forward_s"] + p["layer_backward_s"] + p["mtp_forward_s"] + p["mtp_backward_s"])
    assert b["breakdown_s"]["compute"] - a["breakdown_s"]["compute"] == pytest.approx(extra, rel=1e-9)
    assert p["mtp_forward_s"] > p["head_forward_s"]       # the head again, plus the projection
    assert float(b["critical_stage_layers"]) == 62


def test_dualpipe_paces_at_a_device_of_two_stages():
    # DeepSeek-V3 (no MTP), pp 16: 61 blocks split 3 / 14 x 4 / 3. Under 1F1B the last stage (3
    # blocks + the 129K-vocabulary head) is slower than a middle one (4 blocks); under DualPipe
    # device 0 runs the first and the last stage for half the micro-batches each, 3 blocks + half the
    # head and embedding per micro-batch, and a middle device (two 4-block stages) paces the step
    hw, m = load_hardware("h800"), load_model("deepseek-v3")
    st = Settings(dtype="fp8", stack=load_stack("hai-llm"))
    one = step_time(m, hw, Parallel(tp=1, pp=16, dp=128, ep=64, seq=4096, microbatches=120, schedule=1), st,
                    with_memory=False)
    dual = step_time(m, hw, Parallel(tp=1, pp=16, dp=128, ep=64, seq=4096, microbatches=120, schedule=4), st,
                     with_memory=False)
    assert float(one["critical_stage_layers"]) == 3 and float(one["parts"]["has_head"]) == 1.0
    assert float(dual["critical_stage_layers"]) == 4 and float(dual["parts"]["has_head"]) == 0.0
    # with the MTP module the end device is the heavier: (3 + 3) / 2 blocks + half of two heads
    dm = step_time(load_model("deepseek-v3-mtp"), hw,
                   Parallel(tp=1, pp=16, dp=128, ep=64, seq=4096, microbatches=120, schedule=4), st, with_memory=False)
    assert float(dm["critical_stage_layers"]) == 3 and float(dm["parts"]["has_head"]) == 0.5
