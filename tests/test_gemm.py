"""`llmpar calibrate gemm`: the generic efficiency-curve fit, the model's GEMM shapes, the no-GPU
message, and the CPU pipeline end to end on tiny shapes."""

from __future__ import annotations

import numpy as np
import pytest

from llmpar.specs.hardware import GemmEfficiency
import yaml

from conftest import assert_one_line_error
from llmpar.calibrate import gemm
from llmpar.calibrate import gemm_fit
from llmpar.specs import load_hardware, load_model


def _grid():
    # smallest dimensions from 16 to 16384 in mixed shapes (skinny, square, wide)
    ds = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    m = np.array([d for d in ds] + [8192] * len(ds) + [d for d in ds])
    n = np.array([d for d in ds] + [d for d in ds] + [4 * d for d in ds])
    k = np.array([d for d in ds] + [16384] * len(ds) + [2 * d for d in ds])
    return m, n, k


# synthetic truth for each parameter of the profile's curve (GemmEfficiency, cost.compute):
# a large-GEMM ceiling of 83 %, half efficiency at a smallest dimension of 150, and (when the curve
# has a per-launch term) half efficiency at 5e8 FLOPs per launch
TRUTH = {"max_efficiency": 0.83, "half_dim": 150.0, "half_flops": 5e8}


def _truth():
    names, _ = gemm_fit.curve_parameters()
    missing = [x for x in names if x not in TRUTH]
    assert not missing, f"give the new curve parameter(s) {missing} a synthetic value in TRUTH"
    return {x: TRUTH[x] for x in names}


def test_fit_recovers_known_parameters():
    m, n, k = _grid()
    truth = _truth()
    eff = gemm_fit.efficiency_curve(truth, m, n, k)
    params, q = gemm_fit.fit_curve(m, n, k, eff, start={"max_efficiency": 0.5, "half_dim": 10.0})
    for name, value in truth.items():
        assert params[name] == pytest.approx(value, rel=0.01), name
    assert q["rms_rel_error"] < 1e-6 and q["samples"] == m.size


def test_fit_with_measurement_noise():
    m, n, k = _grid()
    truth = _truth()
    rng = np.random.default_rng(7)
    # +-0.2 % multiplicative noise
    eff = gemm_fit.efficiency_curve(truth, m, n, k) * (1 + rng.uniform(-0.002, 0.002, size=m.size))
    params, q = gemm_fit.fit_curve(m, n, k, eff)
    for name, value in truth.items():
        assert params[name] == pytest.approx(value, rel=0.01), name
    assert q["max_rel_error"] < 0.01


def test_fit_is_deterministic_and_robust():
    # same measurements, same curve, bit for bit; measurements moved by 1e-9 (relative) move the
    # fitted parameters by about as much (one minimum; 1e-6 leaves room for the solver's tolerance)
    m, n, k = _grid()
    eff = gemm_fit.efficiency_curve(_truth(), m, n, k) * (1 + np.random.default_rng(7).uniform(-0.002, 0.002, size=m.size))
    a, _ = gemm_fit.fit_curve(m, n, k, eff)
    b, _ = gemm_fit.fit_curve(m, n, k, eff)
    assert a == b
    c, _ = gemm_fit.fit_curve(m, n, k, eff * (1 + 1e-9 * np.random.default_rng(1).standard_normal(m.size)))
    for name in a:
        assert c[name] == pytest.approx(a[name], rel=1e-6), name


def test_curve_is_the_cost_models():
    # the fit evaluates llmpar.cost.compute.gemm_efficiency, so a profile with the fitted values
    # predicts exactly what the fit saw: H100 profile 0.80 * 64/(64+64) = 0.40 at d = 64
    from llmpar.cost.compute import gemm_efficiency

    hw = load_hardware("h100-sxm")
    p = hw.gpu.gemm.model_dump()
    assert gemm_fit.efficiency_curve(p, 64, 4096, 8192) == pytest.approx(float(gemm_efficiency(hw, 64, 4096, 8192)))
    names, bounds = gemm_fit.curve_parameters()
    assert set(names) == set(GemmEfficiency.model_fields)  # every float field of the curve
    assert bounds["max_efficiency"][1] == 1.0 and bounds["half_dim"][0] == 0.0


def test_model_shapes_llama_70b():
    shapes = {s.label: (s.m, s.n, s.k) for s in gemm.model_shapes(load_model("llama-3-70b"), [8], [4096])}
    # Llama-3-70B: h 8192, 64 heads x 128, 8 KV heads, SwiGLU ffn 28672, vocab 128256; tp = 8
    assert shapes["qkv tp8 T4096"] == (4096, (64 + 2 * 8) * 128 // 8, 8192)      # n = 1280
    assert shapes["attn_out tp8 T4096"] == (4096, 8192, 64 * 128 // 8)           # k = 1024
    assert shapes["mlp_up tp8 T4096"] == (4096, 2 * 28672 // 8, 8192)            # gate + up fused: 7168
    assert shapes["mlp_down tp8 T4096"] == (4096, 8192, 28672 // 8)              # k = 3584
    assert shapes["lm_head tp8 T4096"] == (4096, 128256 // 8, 8192)              # n = 16032


def test_no_gpu_message(cli, monkeypatch):
    pytest.importorskip("torch", reason="the bench extra (torch) is not installed")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = cli("calibrate", "gemm", "--hardware", "h100-sxm")
    assert res.code == 0 and res.out == ""
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no CUDA GPU" in lines[0]


def test_bad_input(cli):
    assert_one_line_error(cli("calibrate", "gemm", "--device", "tpu"), "--device")
    assert_one_line_error(cli("calibrate", "gemm", "--model", "llama-9000"), "unknown model")
    assert_one_line_error(cli("calibrate", "gemm", "--tp", "0,2"), "--tp")
    assert_one_line_error(cli("calibrate", "gemm", "--square", "64", "--max-dim", "32", "--model", "llama-3-8b"),
                          "no GEMM shape")


@pytest.mark.torch
def test_cpu_pipeline_writes_a_loadable_profile(cli, tmp_path):
    pytest.importorskip("torch", reason="the bench extra (torch) is not installed")
    out = tmp_path / "cpu-gemm.yaml"
    # CPU fp32 matmuls of 16..128 (tiny: the pipeline, not the numbers, is under test); the model's
    # shapes are all above --max-dim 128 and drop out, so only the squares are measured
    res = cli("calibrate", "gemm", "--device", "cpu", "--dtype", "fp32", "--square", "16,32,64,128", "--max-dim", "128",
              "--iters", "2", "--warmup", "1", "--model", "llama-3-8b", "--out", out, "--json")
    assert res.code == 0, res.err
    data = res.json()
    from test_json_schema import assert_keys_pinned

    assert_keys_pinned(data, "calibrate gemm")   # docs/json.md, calibrate gemm
    assert [s["m"] for s in data["samples"]] == [16, 32, 64, 128]
    # efficiency = 2 m n k / t / peak, with the profile's fp32 peak (H100: 67 TFLOPS)
    s = data["samples"][3]
    assert s["efficiency"] == pytest.approx(2 * 128**3 / s["time_s"] / 67e12)
    doc = yaml.safe_load(out.read_text())
    assert doc["extends"] == "h100-sxm" and set(doc["gpu"]["gemm"]) == set(GemmEfficiency.model_fields)
    assert len(doc["calibration"]["gemm"]["measurements"]) == 4
    hw = load_hardware(str(out))  # extends resolved, pydantic-valid
    assert hw.gpu.gemm.max_efficiency == pytest.approx(data["fit"]["params"]["max_efficiency"], rel=1e-5)
    assert hw.gpu.peak_flops["bf16"] == 989e12  # everything else comes from the base profile
