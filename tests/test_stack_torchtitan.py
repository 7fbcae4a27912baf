"""The torchtitan stacks (stacks/torchtitan.yaml, stacks/torchtitan-compile.yaml; docs/stacks.md).
Each expected value is read from the torchtitan source cited beside it."""

from __future__ import annotations

import pytest

from llmpar.cost import memory as M
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_model, load_stack
from llmpar.specs.registry import shipped_names

LLAMA7 = load_model("llama-2-7b")


def test_shipped_and_extends():
    assert {"torchtitan", "torchtitan-compile"} <= set(shipped_names("stacks"))
    base, comp = load_stack("torchtitan"), load_stack("torchtitan-compile")
    # FSDP2 = ZeRO-3; reshard_after_forward=False under PP = ZeRO-2; DDP (dp_replicate only) = 0
    assert base.zero_stages == [0, 2, 3] and comp.zero_stages == [0, 2, 3]
    # training.mixed_precision_reduce = float32; enable_async_tensor_parallel off; torchao Float8Linear on
    # every nn.Linear but "output"; no fp8 all-gather by default (config_manager.py, float8.py at 9dec370)
    assert base.overlap.grad_reduce_dtype == "fp32" and base.overlap.tp_mode == "none" and base.overlap.tp == 0.0
    assert base.kernels.fp8.gemms == ["qkv", "proj", "fc1", "fc2"] and not base.kernels.fp8.primary_weights
    # compile (extends) changes only what Inductor changes: element-wise traffic, launches, the saved set
    assert (base.memory.activations, comp.memory.activations) == ("eager", "fused")
    assert comp.kernels.elementwise_traffic == 1.0 < base.kernels.elementwise_traffic
    assert comp.overlap == base.overlap and comp.zero_stages == base.zero_stages


def _layer(stack):
    c = M.aggregate(M.stack_activation_terms(LLAMA7, False, Settings(stack=stack, attention="flash")),
                    M.checkpoint_term(LLAMA7))
    return M.layer_activation_bytes(c, Parallel(seq=4096))[0]


def test_saved_set_eager_and_compiled():
    # torchtitan's eager block (RMSNorm: x.float() * rsqrt(mean(x^2)); w2(silu(w1 x) * w3 x)) saves the
    # same tensors as HF's LlamaDecoderLayer: 186,504 B/token for Llama-2-7B at b = 1 (tests/test_activations.py);
    # compiled, the fused set 131,712 B/token
    assert _layer("torchtitan") == 186_504 * 4096
    assert _layer("torchtitan-compile") == 131_712 * 4096


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-compile"])
def test_step_names_the_stack(cli, stack):
    res = cli("step", "llama-3-8b", "--stack", stack, "--zero", "3", "--gpus", "8", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["settings"]["stack"] == stack and d["parallel"]["zero"] == 3
    # grad reduce in fp32 (mixed_precision_reduce) and no TP overlap by default
    assert d["settings"]["tp_overlap"] == 0.0
