"""The API's argument rules (docs/api.md, "Argument types are checked, one rule each") where a
review of the serving and planning faces found them broken: numpy integers refused by `serve`,
bools taken as numbers (``pue=True`` was a PUE of 1.0) and numbers as flags (``min_gpus="no"``
searched), ``isl=None`` a TypeError, ``progress="x"`` called mid-sweep, ``source=[]`` validating
nothing and passing any tolerance, unknown keywords of the loaders a TypeError. Each case is
named after what it had done."""

from __future__ import annotations

import numpy as np
import pytest

import llmpar
from llmpar.errors import UserError


# -------------------------------------------------------------- whole numbers: numpy ints, whole floats

def test_serve_takes_numpy_integers_as_the_ints_they_are():
    # np.int64(2) had been refused "--tp must be a whole number, got np.int64(2)"; the same
    # deployment must come out, figure for figure
    plain = llmpar.serve("llama-3-8b", gpus=2, tp=2, concurrency=16, max_num_batched_tokens=8192)
    numpy = llmpar.serve("llama-3-8b", gpus=np.int64(2), tp=np.int32(2), concurrency=np.int64(16),
                         max_num_batched_tokens=np.int64(8192))
    assert numpy.to_dict() == plain.to_dict()


def test_serve_plan_takes_numpy_integers():
    kw = dict(ttft="2s", tpot="200ms", top=3)
    plain = llmpar.serve_plan("llama-3-8b", gpus=2, isl=512, **kw)
    numpy = llmpar.serve_plan("llama-3-8b", gpus=np.int64(2), isl=np.int64(512), **kw)
    assert [c.as_dict() for c in numpy["candidates"]] == [c.as_dict() for c in plain["candidates"]]


def test_a_huge_count_is_out_of_range_not_a_fraction():
    # 10**30 is a whole number; float(10**30) != 10**30 had made it "not a whole number"
    with pytest.raises(UserError, match=r"^--gpus 1e\+30 is out of range: at most 1,048,576"):
        llmpar.serve("llama-3-8b", gpus=10**30)


def test_lora_rank_takes_a_whole_float():
    # docs/api.md: an integer argument takes a float with a whole value; 8.0 had been refused
    a = llmpar.memory("llama-3-8b", finetune="lora", lora_rank=8)
    b = llmpar.memory("llama-3-8b", finetune="lora", lora_rank=8.0)
    assert b.memory["total_bytes"] == a.memory["total_bytes"]
    with pytest.raises(UserError, match="lora-rank must be a whole number"):
        llmpar.memory("llama-3-8b", finetune="lora", lora_rank=8.5)
    with pytest.raises(UserError, match="lora-rank must be a whole number"):
        llmpar.memory("llama-3-8b", finetune="lora", lora_rank=True)


# ------------------------------------------------------------------------ None is the default

def test_isl_and_osl_none_are_the_defaults():
    # serve's defaults are isl 1024, osl 128 (docs/serving.md); None had raised a TypeError
    base = llmpar.serve("llama-3-8b", concurrency=8)
    for kw in (dict(isl=None), dict(osl=None), dict(isl=None, osl=None)):
        r = llmpar.serve("llama-3-8b", concurrency=8, **kw)
        assert (r.settings["isl"], r.settings["osl"]) == (1024, 128)
        assert r.to_dict() == base.to_dict()
    p = llmpar.serve_plan("llama-3-8b", gpus=1, isl=None, osl=None, ttft="2s", tpot="200ms", top=1)
    assert (p["isl"], p["osl"]) == (1024, 128)


# ------------------------------------------------------------------ numbers are not bools, and back

@pytest.mark.parametrize("kw, name", [
    (dict(pue=True), "pue"), (dict(gpu_hour_price=True), "gpu-hour-price"),
    (dict(failure_rate=True), "failure-rate"), (dict(power_per_gpu=np.bool_(True)), "power-per-gpu"),
])
def test_training_numbers_refuse_bools(kw, name):
    # pue=True had run as a PUE of 1.0 (float(True)), gpu_hour_price=True as $1 per GPU-hour
    with pytest.raises(UserError, match=rf"^--{name} takes a number, got (np\.)?True"):
        llmpar.step("llama-3-8b", tokens="1T", **kw)


def test_serve_plan_price_refuses_a_bool():
    with pytest.raises(UserError, match=r"^--gpu-hour-price True"):
        llmpar.serve_plan("llama-3-8b", gpus=1, ttft="2s", tpot="200ms", gpu_hour_price=True)


@pytest.mark.parametrize("value", ["no", "false", float("nan"), 2, 0])
def test_min_gpus_is_a_flag(value):
    # min_gpus="no" (a non-empty string) had searched the GPU count
    with pytest.raises(UserError, match=r"^min_gpus must be True or False"):
        llmpar.plan("llama-3-8b", min_gpus=value)


@pytest.mark.parametrize("kw, message", [
    (dict(algorithm=False), r"^unknown algorithm False"),
    (dict(algorithm=""), r"^unknown algorithm ''"),
    (dict(sweep=0), r"^--sweep expects A:B"),
    (dict(sweep=""), r"^--sweep expects A:B"),
])
def test_collective_reads_a_falsy_algorithm_or_sweep(kw, message):
    # algorithm=False and sweep=0 had been taken as "not given" (a truth test, not a None test)
    with pytest.raises(UserError, match=message):
        llmpar.collective("all-reduce", **kw)


def test_offload_layers_false_is_refused_not_none():
    # False == 0 had passed as "no offloading"
    with pytest.raises(UserError, match=r"^offload_layers must be a whole number, got False"):
        llmpar.memory("llama-3-8b", offload_layers=False)
    assert llmpar.memory("llama-3-8b", offload_layers=0).parallel.offload_layers == 0


# --------------------------------------------------------------------------- seconds, callbacks

def test_serve_plan_targets_take_seconds_as_numbers():
    # docs/api.md: ttft/tpot take "500ms" or seconds; 0.5 had been refused "give a unit"
    a = llmpar.serve_plan("llama-3-8b", gpus=1, ttft=0.5, tpot=0.05, top=2)
    b = llmpar.serve_plan("llama-3-8b", gpus=1, ttft="500ms", tpot="50ms", top=2)
    assert [c.as_dict() for c in a["candidates"]] == [c.as_dict() for c in b["candidates"]]
    for bad in (0, -1.0):
        with pytest.raises(UserError, match="must be positive"):
            llmpar.serve_plan("llama-3-8b", gpus=1, ttft=bad)
    with pytest.raises(UserError, match=r"^--ttft 0: a latency target must be positive"):
        llmpar.serve_plan("llama-3-8b", gpus=1, ttft="0")
    with pytest.raises(UserError, match=r"^ttft must be a latency target"):
        llmpar.serve_plan("llama-3-8b", gpus=1, ttft=True)


def test_sweep_progress_must_be_a_function():
    # progress="x" had been called after the first plan: TypeError 'str' object is not callable
    with pytest.raises(UserError, match=r"^progress must be a function progress\(name, done, total\)"):
        llmpar.sweep("llama-3-8b", gpus="8", progress="x")


@pytest.mark.parametrize("kw", [dict(units="gib"), dict(keep_points=True)])
def test_sweep_refuses_what_it_would_ignore(kw):
    with pytest.raises(UserError, match=rf"^sweep\(\) takes no {next(iter(kw))}"):
        llmpar.sweep("llama-3-8b", gpus="8", **kw)


# ---------------------------------------------------------------------------------- validate

def test_validate_an_empty_source_list_is_refused():
    # [] had validated nothing, and so passed tolerance=0.0001
    with pytest.raises(UserError, match=r"^source=\[\] names no source"):
        llmpar.validate([], tolerance=0.0001)


def test_validate_finetune_is_the_cli_block():
    # `validate --finetune --json` is {"finetune": block}; the API had refused finetune=
    r = llmpar.validate(finetune=True)
    from llmpar.validation.finetune import validate_finetune

    assert r.to_dict() == {"finetune": validate_finetune()}
    assert r.finetune["rows"], "the shipped LoRA/QLoRA runs"
    with pytest.raises(UserError, match=r"limit changes nothing there"):
        llmpar.validate(finetune=True, limit=2)
    with pytest.raises(UserError, match="choose one"):
        llmpar.validate(finetune=True, serving=True)
    with pytest.raises(UserError, match=r"^finetune must be True or False"):
        llmpar.validate(finetune="yes")


# ------------------------------------------------------------------------------------ loaders

@pytest.mark.parametrize("call, message", [
    (lambda: llmpar.load_model("llama-3-8b", hff="x"), r"load_model\(\) takes no keyword 'hff' \(did you mean: hf"),
    (lambda: llmpar.load_hardware("h100-sxm", hardwar="x"), r"load_hardware\(\) takes no keyword 'hardwar'"),
    (lambda: llmpar.load_stack("megatron-core", stak="x"), r"load_stack\(\) takes no keyword 'stak'"),
])
def test_loaders_name_an_unknown_keyword(call, message):
    with pytest.raises(UserError, match=message):
        call()
