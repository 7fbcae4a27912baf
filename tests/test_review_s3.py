"""Silently accepted or misread input (reliability review, S3 items 20, 22, 25, 29, 30, 36)."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

import llmpar
from llmpar.specs import load_hardware, load_stack
from llmpar.specs.registry import read_yaml


def test_yaml_numbers_read_as_yaml_1_2(tmp_path):
    # items 20 and 36: 3e9 is a float (YAML 1.1: text), 010 is ten (1.1: octal 8), 1:30 is text
    # (1.1: sexagesimal 90); underscores, 0o and 0x forms, .inf and dates as before
    f = tmp_path / "n.yaml"
    f.write_text("a: 010\nb: 1:30\nc: 1_000\nd: 0x1f\ne: 0o17\nf: 3e9\ng: -5e-1\nh: 2.5\ni: .inf\n")
    assert read_yaml(f) == {"a": 10, "b": "1:30", "c": 1000, "d": 31, "e": 15, "f": 3e9, "g": -0.5, "h": 2.5,
                            "i": float("inf")}
    hw = tmp_path / "hw.yaml"
    hw.write_text("name: x\nextends: h100-sxm\ngpu: {gemm: {half_flops: 3e9}}\n")
    st = tmp_path / "st.yaml"
    st.write_text("name: x\nextends: megatron-core\noverlap: {tp: 5e-1}\n")
    assert load_hardware(str(hw)).gpu.gemm.half_flops == 3e9 and load_stack(str(st)).overlap.tp == 0.5


@pytest.mark.parametrize("option, value, needle", [
    ("--pue", "1e30", "--pue"), ("--gpu-hour-price", "1e308", "--gpu-hour-price"),
    ("--power-per-gpu", "1e30", "--power-per-gpu"), ("--tokens", "1e30", "--tokens"),
])
def test_cost_options_are_bounded(cli, option, value, needle):
    # item 22: a 1e30 PUE printed 3.88e+19T MWh, a 1e308 price `cost infT`
    args = ["step", "llama-3-8b", "--gpus", "8"] + (["--tokens", "1T"] if option != "--tokens" else [])
    assert_one_line_error(cli(*args, option, value), needle)


@pytest.mark.parametrize("size", ["1.5B", "1e-3"])
def test_collective_sizes_are_whole_bytes(cli, size):
    # item 25: 1.5 B was reported as 2 B, 1e-3 as 0 B, and priced
    assert_one_line_error(cli("collective", "all-gather", "--size", size, "--gpus", "8"), "whole number of bytes")


def test_a_source_named_twice_is_counted_once():
    # item 29: --source X --source X gave rows 2 for one published row
    r = llmpar.validate(["megatron-core-h100-2024", "megatron-core-h100-2024"], limit=1)
    assert len(r.sources) == 1 and r.groups[0]["rows"] == 1


def test_a_result_s_own_layout_feeds_back():
    # item 30: recompute_layers 0 (all layers, as the JSON writes it) was refused by step()
    p = llmpar.plan("llama-3-8b", gpus=64, top=1)
    d = {k: v for k, v in p.best.parallel.as_dict().items() if k not in ("global_batch", "microbatches")}
    r = llmpar.step("llama-3-8b", gpus=64, global_batch=p.global_batch, **d)
    assert r.step_time_s == pytest.approx(p.best.step_time_s, rel=1e-12)
