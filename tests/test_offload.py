"""Activation offloading (``--offload-layers N``; Megatron-Core cpu_offloading_num_layers):
memory keeps (L - N + 1)/L of the layers' saved activations, the copies cost only what the
compute cannot hide, and the rules Megatron-Core enforces are one-line errors. Numbers by hand."""

from __future__ import annotations

import pytest

from llmpar import api
from llmpar.cost import memory
from llmpar.cost import memory_stage
from llmpar.cost.pipeline import offload_kept_share
from llmpar.parallel import Parallel, Settings
from llmpar.specs import load_hardware, load_model

GB200_70B = dict(hardware="gb200-nvl72", gpus=64, dp=64, zero=3, micro_batch=2, global_batch=256, seq=8192,
                 dtype="fp8")


def test_kept_share_by_hand():
    # 80 layers, 40 offloaded: HBM keeps the 40 others and one in transit, 41/80; none: all; 79: 2/80
    assert float(offload_kept_share(80, 40)) == pytest.approx(41 / 80)
    assert float(offload_kept_share(80, 0)) == 1.0
    assert float(offload_kept_share(80, 79)) == pytest.approx(2 / 80)


def test_memory_drops_by_the_offloaded_layers():
    # the layers' saved activations scale by (L - N + 1)/L = 41/80; the first and last stage's
    # extra terms (token ids, logits: one stage at pp = 1) and the model states do not move
    base = api.memory("llama-3-70b", **GB200_70B)
    off = api.memory("llama-3-70b", **GB200_70B, offload_layers=40)
    a0, a1 = base.memory["activations_bytes"], off.memory["activations_bytes"]
    per_layer = base.activation_bytes_per_layer
    extras = a0 - 80 * per_layer
    assert extras > 0
    assert a1 == pytest.approx(41 * per_layer + extras, rel=1e-9)
    for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert off.memory[k] == base.memory[k]


def test_copies_hide_behind_the_compute_on_c2c_but_not_on_pcie():
    # One Llama-3-70B layer at b = 2, s = 8192 saves A bytes (the no-recompute set: memory's own
    # per-layer figure). 40 of them each way per micro-batch: 40 A / 225 GB/s on GB200's
    # NVLink-C2C share, against the 80 layers' forward: hidden. On an x86 H100 node (PCIe 5.0,
    # 64 GB/s) the same copies take 3.5x longer than on C2C; with a small micro-batch of a long
    # sequence they show.
    model = load_model("llama-3-70b")
    res = api.step("llama-3-70b", **GB200_70B, offload_layers=40)
    assert res.breakdown_s["offload"] == 0.0
    par = Parallel(tp=1, pp=1, dp=64, micro_batch=2, seq=8192, microbatches=2, zero=3)
    c_dense, _ = memory_stage._layer_coeffs(model, Settings(dtype="fp8"))
    a = float(memory.layer_activation_bytes(c_dense, par)[1])
    copy = 40 * a / 225e9
    fwd = res.detail["parts"]["layer_forward_s"] * 80
    assert copy < fwd                          # why nothing is exposed: 40 A / B_host < 80 t_fwd
    h = api.step("llama-3-70b", hardware="h100-sxm", gpus=8, dp=8, zero=3, micro_batch=1, global_batch=8, seq=8192,
                 dtype="fp8", offload_layers=79)
    p = h.detail["parts"]
    a_h = p["offload_bytes_per_microbatch"] / 2 / 79        # per layer, one way
    t_copy = 79 * a_h / 64e9
    expect = max(0.0, t_copy - 80 * p["layer_forward_s"]) + max(0.0, t_copy - 80 * p["layer_backward_s"])
    assert h.breakdown_s["offload"] == pytest.approx(1 * expect, rel=1e-9)   # m = 1 micro-batch
    assert expect > 0                          # PCIe cannot keep up with 79 layers of an 8K sequence


@pytest.mark.parametrize("extra,needle", [
    (dict(pp=2, gpus=64, dp=32), "--pp 1"),
    (dict(recompute="full"), "--recompute none"),
    (dict(offload_layers=80), "below the model's 80 layers"),
])
def test_megatron_rules_are_one_line_errors(cli, extra, needle):
    kw = {**GB200_70B, "offload_layers": 40, **extra}
    args = ["step", "llama-3-70b"]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    res = cli(*args)
    assert res.code == 2 and needle in res.err and len(res.err.strip().splitlines()) == 1


def test_runs_table_reads_megatrons_name(tmp_path):
    from llmpar.calibrate.runs_io import read_runs

    f = tmp_path / "runs.yaml"
    f.write_text("runs:\n  - {model: llama-3-70b, hardware: gb200-nvl72, gpus: 64, tp: 1, pp: 1, seq: 8192, "
                 "global_batch: 256, micro_batch: 2, cpu_offloading_num_layers: 40, dtype: fp8, "
                 "tokens_per_s_per_gpu: 4312}\n")
    run = read_runs([f]).runs[0]
    assert run.layout["offload_layers"] == 40
    hw = load_hardware("gb200-nvl72")
    assert hw.host_bandwidth == pytest.approx(225e9)


def test_a_runs_table_offloading_on_hardware_without_a_host_link_is_one_line(tmp_path, cli):
    # a profile with no host_bandwidth cannot price the copies: refused in one line, not free
    from pathlib import Path

    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "hardware" / "h100-sxm.yaml").read_text())
    data.pop("host_bandwidth")
    data["name"] = "nohost"
    hw = tmp_path / "nohost.yaml"
    hw.write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs.yaml"
    runs.write_text(f"runs:\n  - {{model: llama-3-8b, hardware: {hw}, gpus: 8, tp: 1, pp: 1, seq: 8192, "
                    "global_batch: 8, micro_batch: 1, offload_layers: 4, tokens_per_s_per_gpu: 10000}\n")
    res = cli("calibrate", "runs", str(runs), "--check")
    assert res.code == 2 and "host_bandwidth" in res.err and len(res.err.strip().splitlines()) == 1
    assert "Traceback" not in res.err
