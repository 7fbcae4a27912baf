"""Bad input from an adversarial sweep: integers past int64 in the planner's knobs, absurd model
shapes, absurd GEMM sizes, API arguments of the wrong type, and hardware profiles that miss a unit
or state a domain that cannot be placed. Each ends as one UserError (CLI: one line, exit 2) naming
the culprit; the values just inside each bound still work."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import llmpar
from conftest import REPO, assert_one_line_error
from llmpar.errors import UserError

BIG = 10**30            # past int64 (9.2e18): np.asarray(..., dtype=np.int64) raised OverflowError
MAX_GPUS = 2**22        # parallel.MAX_GPUS = 4,194,304: the bound `memory` applies to --virtual-stages
MAX_BATCH = 2**32       # parallel.MAX_BATCH = 4,294,967,296: the bound on a micro-batch
NAN, INF = float("nan"), float("inf")


# ------------------------------------------------------------------ 1. planner knobs past int64

@pytest.mark.parametrize("args", [
    ("plan", "--virtual-stages", str(BIG)),
    ("plan", "--fix", f"virtual_stages={BIG}"),
    ("plan", "--allow", f"virtual_stages={BIG}"),
    ("sweep", "--virtual-stages", str(BIG)),
])
def test_plan_and_sweep_refuse_virtual_stages_past_the_memory_bound(cli, args):
    cmd, *rest = args
    res = cli(cmd, "llama-3-8b", "--gpus", "64", *rest)
    # the same bound `llmpar memory --virtual-stages` states: at most 4,194,304
    assert_one_line_error(res, "virtual_stages", f"{MAX_GPUS:,}")
    assert_one_line_error(cli("memory", "llama-3-8b", "--gpus", "64", "--pp", "2", "--virtual-stages", str(BIG)),
                          "--virtual-stages", f"{MAX_GPUS:,}")


@pytest.mark.parametrize("spec, bound", [
    (f"micro_batch={BIG}", MAX_BATCH), (f"tp={2**63}", MAX_GPUS), (f"offload_layers={BIG}", MAX_GPUS),
    (f"virtual_stages={MAX_GPUS + 1}", MAX_GPUS),
])
def test_fix_and_allow_integers_are_bounded(cli, spec, bound):
    knob = spec.split("=")[0]
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "64", "--allow", spec), knob, f"{bound:,}")


def test_knob_bounds_are_inclusive():
    from llmpar.planner import knobs

    # the bound itself is a value (the planner then finds it infeasible, as any v that divides no stage)
    assert knobs.parse_values("virtual_stages", str(MAX_GPUS)) == (MAX_GPUS,)
    assert knobs.parse_values("micro_batch", str(MAX_BATCH)) == (MAX_BATCH,)
    with pytest.raises(UserError, match="micro_batch=4294967297 is beyond"):
        knobs.parse_values("micro_batch", str(MAX_BATCH + 1))


# ------------------------------------------------------------------------ 2. model shape bounds

def _llama_copy(tmp_path: Path, key: str, value) -> Path:
    text = (REPO / "models" / "llama-3-8b.yaml").read_text()
    text, n = re.subn(rf"^{key}: .*$", f"{key}: {value}", text, flags=re.M)
    assert n == 1, key
    # another model than the shipped one: its own name (a file cannot pass for a shipped model)
    text = re.sub(r"^name: .*$", f"name: llama-3-8b-{key}", text, count=1, flags=re.M)
    path = tmp_path / f"{key}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("key, value, bound", [
    ("hidden", BIG, 2**20), ("vocab", BIG, 2**24), ("ffn_hidden", BIG, 2**20), ("layers", 100_000_000_000, 10_000),
    ("heads", 2**17, 65_536), ("max_seq", 2**25, 2**24),
])
def test_model_yaml_shapes_are_bounded(cli, tmp_path, key, value, bound):
    path = _llama_copy(tmp_path, key, value)
    for cmd in ("memory", "step"):
        # was: OverflowError in cost/states.py (hidden, vocab), or 10^11 GB per GPU (layers)
        assert_one_line_error(cli(cmd, path), f"field '{key}'", str(bound))


@pytest.mark.parametrize("key, spec_field, bound", [("hidden_size", "hidden", 2**20), ("vocab_size", "vocab", 2**24)])
def test_hf_config_shapes_are_bounded(cli, tmp_path, key, spec_field, bound):
    cfg = {"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
           "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192}
    cfg[key] = BIG
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert_one_line_error(cli("memory", "--hf", path), f"field '{spec_field}'", str(bound))
    with pytest.raises(UserError, match=spec_field):
        llmpar.plan(hf=str(path), gpus=8)


def test_shape_bounds_admit_every_shipped_model_and_the_bound_itself(tmp_path):
    from llmpar.cost.params import total_params
    from llmpar.specs import registry

    for name in registry.shipped_names("models"):
        llmpar.load_model(name)
    # 10,000 layers (the bound) load and count: llama-3-8b's layer holds
    #   attention 4096 x (4096 + 2 x 8 x 128) + 4096 x 4096 = 25,165,824 + 16,777,216 = 41,943,040
    #   SwiGLU MLP 3 x 4096 x 14336 = 176,160,768;  two RMSNorms 2 x 4096 = 8,192
    #   = 218,112,000 parameters, so 9,968 more layers add 2,174,140,416,000
    deep = llmpar.load_model(str(_llama_copy(tmp_path, "layers", 10_000)))
    assert total_params(deep) - total_params(llmpar.load_model("llama-3-8b")) == 9_968 * 218_112_000
    # a hidden size at the bound (2^20, head_dim 128 stated) still gives a finite memory figure
    wide = llmpar.memory(str(_llama_copy(tmp_path, "hidden", 2**20)), gpus=8)
    assert math.isfinite(wide.memory["total_bytes"]) and not wide.fits


def test_bare_parameter_count_is_not_held_to_model_shape_bounds():
    # --params builds a stand-in spec with heads = tp and layers = pp: 20,000 pipeline stages are
    # past the 10,000-layer bound of a real model but within resolve's (MAX_GPUS); the count splits
    # evenly over tp*pp: 7e9 / 20,000 = 350,000 parameters per GPU
    r = llmpar.memory(params="7B", pp=20_000, gpus=20_000)
    assert r.params_per_gpu == pytest.approx(350_000)
    with pytest.raises(UserError, match="^tp must be a whole number, got nan"):
        llmpar.memory(params="7B", tp=NAN)


# ------------------------------------------------------------------------- 3. calibrate gemm sizes

def test_gemm_sizes_are_bounded_before_torch(cli):
    # 2^20 = 1,048,576 per size option, checked before torch is imported for the measurement
    assert_one_line_error(cli("calibrate", "gemm", "--device", "cpu", "--tokens", str(BIG)), "--tokens", "1,048,576")
    assert_one_line_error(cli("calibrate", "gemm", "--device", "cpu", "--tokens", "100000000000", "--max-dim",
                              "100000000000"), "--tokens", "1,048,576")
    assert_one_line_error(cli("calibrate", "gemm", "--device", "cpu", "--square", "64", "--max-dim", str(2**20 + 1)),
                          "--max-dim")
    # within the per-size bound but too big for one GEMM: llama-3-8b's LM head at 10^6 tokens is
    # (10^6 x 4,096 + 4,096 x 128,256 + 10^6 x 128,256) x 2 B (bf16) = 132,877,336,576 x 2 B
    # = 265,754,673,152 B = 247.5 GiB (printed 248) > 64 GiB
    res = cli("calibrate", "gemm", "--device", "cpu", "--model", "llama-3-8b", "--tokens", "1000000",
              "--max-dim", "1000000")
    assert_one_line_error(res, "lm_head", "248 GiB", "64 GiB")


def test_gemm_allocation_failure_is_one_line(monkeypatch):
    torch = pytest.importorskip("torch", reason="the bench extra (torch) is not installed")
    from llmpar.calibrate import gemm

    def no_memory(*a, **k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
                           "you tried to allocate 400000000000 bytes.\nframe #0: ...")

    monkeypatch.setattr(torch, "randn", no_memory)
    with pytest.raises(UserError, match=r"square 8 \(8 x 8 @ 8 x 8\) does not fit in cpu's memory") as exc:
        gemm.measure([gemm.Shape("square 8", 8, 8, 8)], "cpu", "fp32", iters=1, warmup=0)
    assert "\n" not in str(exc.value)

    def other(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    # a failure that is not about the size of the request is not bad input: it surfaces as it is
    monkeypatch.setattr(torch, "randn", other)
    with pytest.raises(RuntimeError, match="illegal memory access") as exc:
        gemm.measure([gemm.Shape("square 8", 8, 8, 8)], "cpu", "fp32", iters=1, warmup=0)
    assert not isinstance(exc.value, UserError)


# ---------------------------------------------------------------------- 4. API argument types

@pytest.mark.parametrize("bad, kw", [
    ("tp", dict(tp=NAN)), ("gpus", dict(gpus=INF)), ("seq", dict(seq=NAN)), ("micro_batch", dict(micro_batch=INF)),
    ("global_batch", dict(global_batch=NAN)), ("virtual_stages", dict(pp=2, virtual_stages=NAN)),
    ("offload_layers", dict(offload_layers=INF)), ("recompute_layers", dict(recompute="full", recompute_layers=NAN)),
    ("batch", dict(inference=True, batch=NAN)), ("context", dict(inference=True, context=INF)),
    ("tp", dict(tp="2")), ("tp", dict(tp=2.5)), ("zero", dict(zero=True)),
])
def test_memory_integer_arguments(bad, kw):
    # was ValueError/OverflowError from int(nan) / int(inf) in parallel.positive_int; "2" and True are not numbers
    with pytest.raises(UserError, match=rf"^{bad} must be a whole number"):
        llmpar.memory("llama-3-8b", **kw)


def test_integral_floats_are_integers_everywhere():
    # one rule (docs/api.md): 2.0 is 2 in memory and in plan alike; 8 GPUs / tp 2 = dp 4
    assert int(llmpar.memory("llama-3-8b", tp=2.0, gpus=8.0).parallel.dp) == 4
    a = llmpar.plan("llama-3-8b", gpus=8.0, top=1, fix={"tp": 2.0}).best.parallel.as_dict()
    b = llmpar.plan("llama-3-8b", gpus=8, top=1, fix="tp=2").best.parallel.as_dict()
    assert a == b and a["tp"] == 2
    with pytest.raises(UserError, match="^gpus must be a whole number, got '64'"):
        llmpar.plan("llama-3-8b", gpus="64")
    with pytest.raises(UserError, match="^tp must be a whole number, got 2.5"):
        llmpar.plan("llama-3-8b", gpus=8, fix={"tp": 2.5})
    with pytest.raises(UserError, match="^gpus must be a whole number, got 8.5"):
        llmpar.collective("all-reduce", gpus=8.5)
    assert llmpar.collective("all-reduce", gpus=8.0).gpus == 8


@pytest.mark.parametrize("call, culprit", [
    (lambda: llmpar.memory("llama-3-8b", recompute="selective", recompute_modules=5), "recompute_modules"),
    (lambda: llmpar.memory(hf=5), "hf"),
    (lambda: llmpar.load_model(hf=5), "hf"),
    (lambda: llmpar.plan("llama-3-8b", gpus=64, fix=5), "fix"),
    (lambda: llmpar.plan("llama-3-8b", gpus=64, allow=[3]), "allow"),
    (lambda: llmpar.plan("llama-3-8b", gpus=64, top=None), "top"),
    (lambda: llmpar.plan("llama-3-8b", gpus=64, explain_rank=None), "explain_rank"),
    (lambda: llmpar.plan(hf=5, gpus=64), "hf"),
    (lambda: llmpar.plan("llama-3-8b", gpus=64, virtual_stages=NAN), "virtual_stages"),
    (lambda: llmpar.plan("llama-3-8b", gpus=64, recompute=1), "recompute"),
    (lambda: llmpar.validate(5), "source"),
    (lambda: llmpar.validate(limit="a"), "limit"),
    (lambda: llmpar.validate(progress="yes"), "progress"),
    (lambda: llmpar.collective("all-reduce", gpus=8, gpus_per_node=NAN), "gpus_per_node"),
])
def test_wrong_types_name_the_argument(call, culprit):
    with pytest.raises(UserError, match=rf"^{culprit} must be"):
        call()


@pytest.mark.parametrize("call, culprit", [
    (lambda: llmpar.memory("llama-3-8b", sp="no", tp=2, gpus=8), "sp"),
    (lambda: llmpar.memory("llama-3-8b", inference="no"), "inference"),
    (lambda: llmpar.memory("llama-3-8b", per_stage=1), "per_stage"),
    (lambda: llmpar.memory("llama-3-8b", explain="yes"), "explain"),
    (lambda: llmpar.step("llama-3-8b", sp=0), "sp"),
    (lambda: llmpar.plan("llama-3-8b", gpus=8, sp="off"), "sp"),
    (lambda: llmpar.plan("llama-3-8b", gpus=8, pareto="no"), "pareto"),
    (lambda: llmpar.collective("all-reduce", explain="no"), "explain"),
])
def test_booleans_take_only_bools(call, culprit):
    # sp="no" used to turn SP on (a non-empty string is true) and inference="no" ran inference
    with pytest.raises(UserError, match=rf"^{culprit} must be True or False"):
        call()


def test_bools_still_work():
    # SP off at tp 2 keeps it off; with None it defaults to on (tp > 1)
    assert llmpar.memory("llama-3-8b", sp=False, tp=2, gpus=8).parallel.sp is False
    assert llmpar.memory("llama-3-8b", sp=None, tp=2, gpus=8).parallel.sp is True
    assert llmpar.memory("llama-3-8b", inference=False).mode == "training"


@pytest.mark.parametrize("kw", [dict(dp_overlap="0.5"), dict(tp_overlap=True), dict(ep_overlap=[0.5])])
def test_fractions_take_numbers_not_strings(kw):
    name = next(iter(kw))
    with pytest.raises(UserError, match=rf"^{name} must be a number between 0 and 1"):
        llmpar.step("llama-3-8b", gpus=8, **kw)
    with pytest.raises(UserError, match=rf"^{name} must be a number between 0 and 1"):
        llmpar.plan("llama-3-8b", gpus=8, **kw)
    # an int is a number: dp_overlap=1 hides all DP traffic it can, as 1.0 does
    assert llmpar.step("llama-3-8b", gpus=8, dp_overlap=1).settings.dp_overlap == 1.0


# ---------------------------------------------------------------------------- 5. hardware YAML

def _profile(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "hw.yaml"
    path.write_text("extends: h100-sxm\nname: mine\n" + body)
    return path


def test_gpu_memory_without_a_unit(cli, tmp_path):
    # `memory: 80` is 80 bytes (the profile printed "memory 0.0 GB"): below 1 GiB is a missing unit
    res = cli("memory", "llama-3-8b", "--hardware", _profile(tmp_path, "gpu:\n  memory: 80\n"))
    assert_one_line_error(res, "gpu.memory", "below 1 GiB", "unit")
    # 1 GiB itself is a (small) GPU: 2^30 B = 1.07 GB
    assert llmpar.load_hardware(str(_profile(tmp_path, "gpu:\n  memory: 1 GiB\n"))).gpu.memory == 2**30


def test_domain_size_must_divide_or_be_a_multiple_of_gpus_per_node(cli, tmp_path):
    tier = "tiers:\n  - name: nvlink\n    domain_size: {}\n"
    res = cli("memory", "llama-3-8b", "--hardware", _profile(tmp_path, tier.format(3)))
    assert_one_line_error(res, "domain_size 3", "gpus_per_node (8)")
    # 4 divides 8 (part of a node) and 16 is two nodes: both placeable
    assert llmpar.load_hardware(str(_profile(tmp_path, tier.format(4)))).nvlink_domain == 4
    assert llmpar.load_hardware(str(_profile(tmp_path, tier.format(16)))).nvlink_domain == 16
    # every shipped profile keeps the rule (gb200-nvl72: 72 GPUs = 18 trays of 4)
    from llmpar.specs import registry

    for name in registry.shipped_names("hardware"):
        hw = llmpar.load_hardware(name)
        for t in hw.tiers[:-1]:
            assert t.domain_size % hw.gpus_per_node == 0 or hw.gpus_per_node % t.domain_size == 0, name


def test_empty_tiers_under_extends_is_refused(cli, tmp_path):
    # `tiers: []` under extends: used to merge item by item, vacuously, keeping the base's tiers
    assert_one_line_error(cli("memory", "llama-3-8b", "--hardware", _profile(tmp_path, "tiers: []\n")), "tiers")


@pytest.mark.parametrize("knob", [{"optimizer": "adam"}, {"optimizer": "sgd"}, {"convention": "llmpar"},
                                  {"convention": "megatron"}])
def test_memory_inference_refuses_optimizer_and_convention(knob):
    """Serving keeps no optimizer state: a given optimizer or convention is refused with
    inference=True, even when it names the training default (the API takes None as "not given")."""
    with pytest.raises(UserError, match=f"--{next(iter(knob))}"):
        llmpar.memory("llama-3-8b", inference=True, batch=1, context=1024, **knob)


def test_memory_training_defaults_unchanged_by_none():
    """optimizer=None and convention=None are Adam and llmpar's convention for training: the same
    bytes as stating them. Model states at ZeRO-0 under megatron-core: 2 B bf16 weights + 4 B fp32
    gradients (grad_reduce_dtype fp32) + 12 B Adam (fp32 master, m, v) = 18 B per parameter."""
    a = llmpar.memory("llama-3-8b", tp=1, dp=1, seq=1024)
    b = llmpar.memory("llama-3-8b", tp=1, dp=1, seq=1024, optimizer="adam", convention="llmpar")
    assert a.memory == b.memory
    assert a.settings.optimizer == "adam" and a.settings.convention == "llmpar"
    states = a.memory["weights_bytes"] + a.memory["gradients_bytes"] + a.memory["optimizer_bytes"]
    assert states == pytest.approx(18 * a.params_per_gpu, rel=1e-12)


# --------------------------------------- an API review of 2026-12-04: keywords, flags and lists

@pytest.mark.parametrize("call,culprit", [
    (lambda: llmpar.memory("llama-3-8b", microbatch=2), "'microbatch' (did you mean: micro_batch"),
    (lambda: llmpar.step("llama-3-8b", explain=True), "'explain': the result's terms"),
    (lambda: llmpar.serve("llama-3-8b", explain=True), "'explain'"),
    (lambda: llmpar.plan("llama-3-8b", gpus=8, microbatch=2), "plan() takes no keyword 'microbatch'"),
    (lambda: llmpar.sweep("llama-3-8b", gpus=[8], foo=1), "sweep() takes no keyword 'foo'"),
    (lambda: llmpar.serve_plan("llama-3-8b", gpus=1, top_k=3), "serve_plan() takes no keyword 'top_k'"),
    (lambda: llmpar.collective("all-reduce", gpu=8), "'gpu' (did you mean: gpus"),
    (lambda: llmpar.validate(json=True), "'json': r.model_dump()"),
    (lambda: llmpar.plan("llama-3-8b", gpus=8, units="foo"), "units must be one of gb, gib"),
    (lambda: llmpar.serve("deepseek-v3", gpus=16, tp=16, ep=16, weights="fp8", hardware="h200", concurrency=64,
                          dp_attention="no"), "dp_attention must be True or False"),
    (lambda: llmpar.serve_plan("llama-3-70b", rate=10, ttft="500ms", disagg="no"), "disagg must be True or False"),
    (lambda: llmpar.serve_plan("llama-3-70b", gpus=8, engine=5), "engine must be a name"),
    (lambda: llmpar.serve_plan("llama-3-70b", gpus=8, weights=5), "weights must be a name"),
])
def test_a_keyword_the_api_does_not_take_or_a_wrong_type_is_one_user_error(call, culprit):
    """Python's TypeError (an unexpected keyword, 'int' object is not iterable) or a truthy "no"
    had been what these calls gave: each is now one UserError naming the keyword."""
    with pytest.raises(UserError) as e:
        call()
    assert culprit in str(e.value) and "\n" not in str(e.value)


def test_hardware_none_and_hf_alone_take_the_defaults(tmp_path):
    """hardware=None is the default profile (as sweep() took it); serve() and serve_plan() take a
    config.json by hf= alone, as memory() and step() do."""
    assert llmpar.memory("llama-3-8b", hardware=None).hardware == "h100-sxm"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                               "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "vocab_size": 128256, "max_position_embeddings": 8192}))
    assert llmpar.serve(hf=str(cfg), concurrency=4).fits
    assert llmpar.serve_plan(hf=str(cfg), gpus=1)["candidates"]


def test_over_tolerance_takes_a_percentage_as_validate_does():
    r = llmpar.validate(source="korthikanti2022-table5")
    assert r.over_tolerance("1%") == r.over_tolerance(0.01) and r.over_tolerance("50%") == []
