"""Two classes of failure closed once (reliability review, items 1-3): a writer never overwrites
its own input or a file of its extends: chain, and writes only a spec that loads; every float of
every spec is finite."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from _synthetic_nccl import SWEEP, TRUTH_YAML, write_log
from conftest import assert_one_line_error

from llmpar.cost.collectives import collective_time
from llmpar.errors import UserError
from llmpar.specs import load_hardware, load_stack
from llmpar.specs.registry import load_engine


@pytest.fixture
def files(tmp_path):
    (tmp_path / "truth.yaml").write_text(TRUTH_YAML)
    truth = load_hardware(str(tmp_path / "truth.yaml"))
    S = np.array(SWEEP)
    log = write_log(tmp_path / "ar.txt", "all_reduce", 8, 1, S, 1.1 * collective_time(truth, "all_reduce", S, 8, 8))
    hw = tmp_path / "myhw.yaml"
    hw.write_text("name: myhw\nextends: h100-sxm\ngpu: {sms: 100}\n")
    child = tmp_path / "child.yaml"
    child.write_text("name: child\nextends: myhw.yaml\n")
    st = tmp_path / "mystack.yaml"
    st.write_text("name: mystack\nextends: megatron-core\nkernels: {ep_dispatcher: deepep}\n")
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump({"hardware": "h100-sxm", "runs": [
        {"model": "llama-3-8b", "gpus": 8, "tp": t, "global_batch": 64, "seq": 8192, "step_time_s": 5.0 + t}
        for t in (1, 2)]}))
    # a runs table whose rows extend a profile no option names, and a model file that extends another
    runs_child = tmp_path / "runs_child.yaml"
    runs_child.write_text(yaml.safe_dump({"hardware": str(child), "runs": [
        {"model": "llama-3-8b", "gpus": 8, "tp": t, "global_batch": 64, "seq": 8192, "step_time_s": 5.0 + t}
        for t in (1, 2)]}))
    base_model = tmp_path / "mymodel.yaml"
    base_model.write_text("name: mymodel\nextends: llama-3-8b\nlayers: 16\n")
    child_model = tmp_path / "mymodel2.yaml"
    child_model.write_text("name: mymodel2\nextends: mymodel.yaml\n")
    return {"log": log, "hw": hw, "child": child, "st": st, "runs": runs, "runs_child": runs_child,
            "model": base_model, "model2": child_model, "dir": tmp_path}


@pytest.mark.parametrize("args, victim", [
    (("calibrate", "fit", "{log}", "--hardware", "{hw}", "--out", "{hw}"), "hw"),        # the base itself
    (("calibrate", "fit", "{log}", "--hardware", "{child}", "--out", "{hw}"), "hw"),     # in the extends chain
    (("calibrate", "fit", "{log}", "--hardware", "{hw}", "--out", "{log}"), "log"),      # an input log
    (("calibrate", "runs", "{runs}", "--stack", "{st}", "--out", "{st}", "--folds", "0"), "st"),
    (("calibrate", "runs", "{runs}", "--stack", "{st}", "--out", "{runs}", "--folds", "0"), "runs"),
    (("calibrate", "gemm", "--hardware", "{hw}", "--device", "cpu", "--out", "{hw}"), "hw"),
    # the class, not the instances (reliability re-check 2026-12-03): any file read, however it was reached
    (("calibrate", "runs", "{runs_child}", "--folds", "0", "--out", "{hw}"), "hw"),      # a row's profile's base
    (("calibrate", "runs", "{runs_child}", "--folds", "0", "--out", "{child}"), "child"),  # a row's profile
    (("calibrate", "runs", "{runs}", "--hardware", "{hw}", "--folds", "0", "--out", "{hw}"), "hw"),
    (("calibrate", "gemm", "--device", "cpu", "--model", "{model2}", "--out", "{model}"), "model"),
    (("plan", "llama-3-8b", "--gpus", "8", "--hardware", "{child}", "--emit", "megatron", "--out", "{hw}"), "hw"),
    (("plan", "{model2}", "--gpus", "8", "--emit", "megatron", "--out", "{model}"), "model"),
    (("validate", "--source", "megatron-core-h100-2024", "--limit", "1", "--stack", "{st}", "--markdown",
      "--out", "{st}"), "st"),
])
def test_a_writer_never_overwrites_its_input(cli, files, args, victim):
    before = files[victim].read_bytes()
    res = cli(*[a.format(**files) for a in args])
    # refused as that file, by one of the three checks (llmpar.outputs: the base or its extends:
    # chain, the command's own inputs, any file the process read), whichever comes first
    assert_one_line_error(res, f"--out {files[victim]}")
    assert any(why in res.err for why in ("extends", "one of the files this command reads",
                                          "a file this command read")), res.err
    assert files[victim].read_bytes() == before


def test_a_written_profile_loads_and_no_temporary_file_is_left(cli, files):
    out = files["dir"] / "fitted.yaml"
    # (the synthetic log names A100s; --gpu restates it for this H100 child, as a fit onto another GPU is refused)
    res = cli("calibrate", "fit", files["log"], "--hardware", files["child"], "--gpu", "NVIDIA H100 80GB HBM3",
              "--out", out)
    assert res.code == 0, res.err
    assert load_hardware(str(out)).name == "fitted"
    assert not [p for p in files["dir"].iterdir() if ".llmpar-" in p.name]


def _float_paths(obj, prefix=""):
    """Every float leaf of a spec's dump (bools and ints left out), as dotted paths."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _float_paths(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, float) and math.isfinite(obj):
        yield prefix


def _with(data: dict, path: str, value) -> dict:
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize("kind, base, load", [("hardware", "h100-sxm", load_hardware),
                                              ("stacks", "megatron-core", load_stack)])
def test_every_float_of_a_spec_refuses_inf_and_nan(tmp_path, kind, base, load):
    # every float field of the shipped profile's dump (its tiers are a list: not walked here), set
    # to .inf or .nan in a file that extends it: one error naming the field, never a loaded spec
    spec = load(base)
    dump = spec.model_dump(exclude={"calibration", "tiers"})
    paths = sorted(set(_float_paths(dump)))
    assert len(paths) >= (12 if kind == "hardware" else 40)   # h100-sxm: 15 (memory, bandwidth, peaks, gemm, power, host ...)
    for i, path in enumerate(paths):
        for value in (float("inf"), float("nan")):
            f = tmp_path / f"x{i}.yaml"
            f.write_text(yaml.safe_dump(_with({"name": "x", "extends": base}, path, value)))
            with pytest.raises(UserError) as e:
                load(str(f))
            assert path.split(".")[0] in str(e.value), (path, str(e.value))


@pytest.mark.parametrize("kind, body, field", [
    # reliability review, item 4: finite but absurd values that used to price 10^57-second steps
    ("hardware", "gpu: {gemm: {half_dim: 1.0e+300}}", "gpu.gemm.half_dim"),
    ("hardware", "gpu: {gemm: {half_flops: 1.0e+300}}", "gpu.gemm.half_flops"),
    ("hardware", "gpu: {gemm: {max_efficiency: 1.0e-300}}", "gpu.gemm.max_efficiency"),
    ("hardware", "gpu: {memory_efficiency: 1.0e-300}", "gpu.memory_efficiency"),
    ("hardware", "host_bandwidth: 1 B/s", "host_bandwidth"),
    ("stacks", "kernels: {moe_s_per_layer: 1.0e+30}", "kernels.moe_s_per_layer"),
    ("stacks", "kernels: {moe_s_per_local_expert: {default: 0, blackwell: 1.0e+30}}", "kernels.moe_s_per_local_expert"),
    ("stacks", "kernels: {zero_gather_s_per_tensor_rank: 1.0e+30}", "kernels.zero_gather_s_per_tensor_rank"),
    ("stacks", "kernels: {elementwise_traffic: 1.0e+300}", "kernels.elementwise_traffic"),
    ("stacks", "kernels: {fp8: {cast_bytes_per_element: 1.0e+300}}", "kernels.fp8.cast_bytes_per_element"),
    ("stacks", "network: {scale_out_latency: 1.0e+300}", "network.scale_out_latency"),
    # the lower bounds, the class (re-check 2026-12-03: 1e-300 in each printed a 10^58-10^60 s step or TTFT):
    # every share of a peak or line rate >= 1e-3 (specs/base.py MIN_SHARE), every multiplier too
    ("stacks", "kernels: {gemm_efficiency: {default: 0.8, hopper: 1.0e-300}}", "kernels.gemm_efficiency"),
    ("stacks", "kernels: {attention: {forward_efficiency: 1.0e-300}}", "kernels.attention.forward_efficiency"),
    ("stacks", "kernels: {attention: {backward_efficiency: 1.0e-300}}", "kernels.attention.backward_efficiency"),
    ("stacks", "kernels: {fp8: {gemm_efficiency: 1.0e-300}}", "kernels.fp8.gemm_efficiency"),
    ("stacks", "kernels: {elementwise_traffic: 1.0e-300}", "kernels.elementwise_traffic"),
    ("stacks", "overlap: {dp_bucket_bytes: 1.0e-300 MB}", "overlap.dp_bucket_bytes"),
    ("stacks", "memory: {activation_factor: 1.0e-300}", "memory.activation_factor"),
    ("stacks", "network: {scale_out_efficiency: 1.0e-300}", "network.scale_out_efficiency"),
    ("stacks", "network: {scale_out_latency: 1.0e-300}", "network.scale_out_latency"),
    ("hardware", "tiers: [{name: infiniband, efficiency: 1.0e-300}]", "tiers.1.efficiency"),
    ("engines", "kernels: {gemm_efficiency: 1.0e-300}", "kernels.gemm_efficiency"),
    ("engines", "kernels: {decode_bandwidth: 1.0e-300}", "kernels.decode_bandwidth"),
    ("engines", "kernels: {attention_efficiency: 1.0e-300}", "kernels.attention_efficiency"),
    ("engines", "scheduler: {memory_fraction: 1.0e-300}", "scheduler.memory_fraction"),
])
def test_absurd_finite_values_are_one_line(tmp_path, kind, body, field):
    base = {"hardware": "h100-sxm", "stacks": "megatron-core", "engines": "vllm"}[kind]
    f = tmp_path / "x.yaml"
    f.write_text(f"name: x\nextends: {base}\n{body}\n")
    with pytest.raises(UserError, match=field.replace(".", r"\.")):
        {"hardware": load_hardware, "stacks": load_stack, "engines": load_engine}[kind](str(f))


def test_more_sms_held_than_the_gpu_has_is_refused(cli, tmp_path):
    f = tmp_path / "sms.yaml"
    f.write_text("name: x\nextends: megatron-core\noverlap: {ep_sms: 200}\n")   # H100 has 132
    assert_one_line_error(cli("step", "mixtral-8x7b", "--gpus", "64", "--ep", "8", "--stack", f), "ep_sms 200", "132 SMs")


def test_every_writer_refuses_a_file_the_process_read(tmp_path):
    """The class, at the writers themselves (llmpar.outputs): once a spec reader has read a file
    (specs.reading.READ_FILES), write_text, write_spec and the plot writer refuse it, and it is
    left as it was."""
    from llmpar.outputs import write_spec, write_text
    from llmpar.specs.reading import read_yaml

    victim = tmp_path / "read.svg"           # any name: the plot writer checks the suffix first
    victim.write_text("name: read\nextends: h100-sxm\n")
    before = victim.read_bytes()
    read_yaml(victim)
    writers = [lambda: write_text(victim, "x"), lambda: write_spec(victim, "name: read\nextends: h100-sxm\n", "hardware")]
    for write in writers:
        with pytest.raises(UserError, match="a file this command read"):
            write()
        assert victim.read_bytes() == before


def test_the_plot_writer_refuses_a_file_the_process_read(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot writer needs the plot extra")
    from llmpar.cli import plots
    from llmpar.specs.reading import read_yaml

    victim = tmp_path / "read.svg"
    victim.write_text("name: read\nextends: h100-sxm\n")
    before = victim.read_bytes()
    read_yaml(victim)
    with pytest.raises(UserError, match="a file this command read"):
        plots.save(plots._plt().figure(), victim)
    assert victim.read_bytes() == before


def test_a_runs_table_read_is_refused_as_an_output(tmp_path):
    """The runs reader records its files too (llmpar.outputs' docstring names runs tables)."""
    from llmpar.calibrate.runs_io import read_runs
    from llmpar.outputs import write_text

    table = tmp_path / "runs.csv"            # a CSV: read as bytes, not through the YAML reader
    table.write_text("model,hardware,gpus,global_batch,seq,step_time_s\nllama-3-8b,h100-sxm,8,64,8192,6.0\n")
    before = table.read_bytes()
    read_runs([str(table)])
    with pytest.raises(UserError, match="a file this command read"):
        write_text(table, "x")
    assert table.read_bytes() == before


@pytest.mark.parametrize("body, needle", [
    # a bare number is seconds: `per_microbatch_s: 59` meant as milliseconds is 59 s
    ("fixed:\n  per_microbatch_s: 59\n", "write e.g. '10 ms'"),
    ("fixed:\n  per_step_s: 5000\n", "write e.g. '50 ms'"),
    ("kernels:\n  launch_s_per_layer: 0.2\n", "write e.g. '20 us'"),
    ("kernels:\n  moe_s_per_local_expert: {default: 0.37}\n", "write e.g. '0.37 ms'"),
])
def test_a_stack_file_s_host_times_are_bounded_with_the_unit_suggested(cli, tmp_path, body, needle):
    """Every host-time field of a stack, as of an engine (the class, review of 2026-12-03): bounded
    at 10x or more what `calibrate runs` fits it within (runs_parameters.PARAMETERS: per micro-batch
    1 s, per step 30 s, per layer 2 ms, per local expert 5 ms), the unit suggested beyond."""
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nextends: megatron-core\n" + body)
    assert_one_line_error(cli("step", "llama-3-8b", "--gpus", "8", "--stack", str(f)), str(f), needle,
                          "more than any framework spends")
