"""Measure matmul throughput and fit the profile's GEMM efficiency curve.

``llmpar calibrate gemm`` times ``torch.matmul`` over the GEMM shapes a model produces (QKV,
attention output projection, MLP up/gate and down, LM head, at a few TP degrees and token counts)
plus square sizes, turns each into efficiency = achieved FLOP/s / the profile's peak for the dtype,
fits the parameters of the efficiency curve to them, and writes a profile that ``extends:`` the
base with ``gpu.gemm`` replaced and a ``calibration.gemm`` record (raw measurements included, so a
later change of the curve's form can be refitted without re-measuring).

The curve itself lives in ONE place, :func:`llmpar.cost.compute.gemm_efficiency`, with its
parameters in :class:`llmpar.specs.hardware.GemmEfficiency`; the generic fit of its parameters to
the measurements is :func:`llmpar.calibrate.gemm_fit.fit_curve` (its module docstring says how).

torch is imported inside functions only. Nothing here prints.
"""

from __future__ import annotations

import datetime
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmpar.calibrate.gemm_fit import efficiency_curve, fit_curve
from llmpar.errors import UserError
from llmpar.specs.registry import DEFAULT_HARDWARE

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}
# Bounds on what is measured, checked before torch is touched (--tokens 10^30 was a torch TypeError,
# --tokens 10^11 an allocator error): every size option (--tokens, --square, --max-dim, --tp) at most
# 2^20, ten times the largest dimension of any model llmpar ships (megatron-gpt-1t's FFN, 102,400),
# and the three matrices of one GEMM (A, B and the product, at --dtype's size) at most 64 GiB (the
# default shapes' largest, llama-3-70b's LM head at 8,192 tokens, takes 4.3 GB). A GEMM within them
# that still does not fit the device is refused when torch cannot allocate it (measure).
MAX_DIM = 2**20
MAX_GEMM_BYTES = 64 * 2**30


@dataclass
class GemmPlan:
    hardware: str = DEFAULT_HARDWARE
    model: str | None = "llama-3-70b"
    dtype: str = "bf16"
    tps: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    tokens: list[int] = field(default_factory=lambda: [2048, 8192])
    square: list[int] = field(default_factory=lambda: [256, 512, 1024, 2048, 4096, 8192])
    max_dim: int | None = None
    iters: int = 10
    warmup: int = 3
    peak: str | float | None = None


@dataclass
class Shape:
    label: str
    m: int
    n: int
    k: int


def model_shapes(model, tps: list[int], tokens: list[int]) -> list[Shape]:
    """Forward GEMMs of one transformer layer (+ LM head) split by TP: (m tokens) x (k) @ (k x n).

    QKV (fused, GQA): n = (heads + 2 kv_heads) * head_dim / tp, k = hidden; attention output:
    n = hidden, k = heads * head_dim / tp; MLP up (+gate fused for SwiGLU): n = (2|1) * ffn / tp,
    k = hidden; MLP down: n = hidden, k = ffn / tp; LM head: n = vocab / tp, k = hidden. MoE models
    use the expert FFN size with tokens * top_k / experts per expert. The backward GEMMs (dgrad,
    wgrad) are the same products transposed, with the same smallest dimension.
    """
    h, a, kv, d = model.hidden, model.heads, model.n_kv_heads, model.d_head
    swiglu = model.ffn_type == "swiglu"
    out: list[Shape] = []
    for tp in tps:
        for T in tokens:
            def add(label, n, k, m=T):
                if n >= 1 and k >= 1 and m >= 1:
                    out.append(Shape(f"{label} tp{tp} T{T}", int(m), int(n), int(k)))
            add("qkv", (a + 2 * kv) * d // tp, h)
            add("attn_out", h, a * d // tp)
            if model.moe is not None:
                f, m_e = model.moe.expert_ffn_hidden, max(1, T * model.moe.top_k // model.moe.experts)
                add("expert_up", (2 if swiglu else 1) * f // tp, h, m_e)
                add("expert_down", h, f // tp, m_e)
            else:
                f = model.ffn_hidden
                add("mlp_up", (2 if swiglu else 1) * f // tp, h)
                add("mlp_down", h, f // tp)
            add("lm_head", model.vocab // tp, h)
    return out


def plan_shapes(plan: GemmPlan) -> list[Shape]:
    """Shapes to measure: the model's (deduplicated) and the squares, within ``max_dim``."""
    from llmpar.cost.states import DTYPE_BYTES
    from llmpar.specs import load_hardware, load_model

    load_hardware(plan.hardware)  # bad names fail here, before any measurement
    for what, vals in (("tokens", plan.tokens), ("square", plan.square), ("tp", plan.tps),
                       ("max-dim", [plan.max_dim] if plan.max_dim else [])):
        big = [v for v in vals if v > MAX_DIM]
        if big:
            raise UserError(f"--{what} {big[0]:,} is above {MAX_DIM:,} (2^20), the largest GEMM size `calibrate gemm` "
                            "measures")
    shapes = model_shapes(load_model(plan.model), plan.tps, plan.tokens) if plan.model else []
    shapes += [Shape(f"square {s}", s, s, s) for s in plan.square]
    seen, out = set(), []
    for s in shapes:
        key = (s.m, s.n, s.k)
        if key in seen or (plan.max_dim and max(key) > plan.max_dim):
            continue
        seen.add(key)
        need = (s.m * s.k + s.k * s.n + s.m * s.n) * DTYPE_BYTES.get(plan.dtype, 4.0)
        if need > MAX_GEMM_BYTES:
            raise UserError(f"GEMM {s.label} ({s.m:,} x {s.k:,} @ {s.k:,} x {s.n:,}) needs {need / 2**30:,.0f} GiB for "
                            f"its matrices, above the {MAX_GEMM_BYTES // 2**30} GiB `calibrate gemm` allocates for one "
                            "GEMM: lower --tokens or --square, or set --max-dim")
        out.append(s)
    if not out:
        raise UserError("no GEMM shape left to measure (raise --max-dim or give --square sizes)")
    return out


def device_unavailable(device: str) -> str | None:
    """A one-line reason why nothing can be measured (no GPU), or None. Bad --device: UserError."""
    dev = str(device).strip().lower()
    if not (dev == "cpu" or dev == "cuda" or dev.startswith("cuda:")):
        raise UserError(f"unknown --device {device!r}: use cuda, cuda:N or cpu")
    try:
        import torch
    except ImportError:
        if dev == "cpu":
            raise UserError("calibrate gemm needs torch: pip install 'llmpar[bench]'") from None
        return "no GPU to measure (torch is not installed: pip install 'llmpar[bench]'); nothing measured"
    if dev.startswith("cuda"):
        if not torch.cuda.is_available():
            return "no CUDA GPU found: `calibrate gemm` measures a GPU; nothing measured (--device cpu tests the pipeline)"
        idx = int(dev.split(":")[1]) if ":" in dev else 0
        if idx >= torch.cuda.device_count():
            raise UserError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s)")
    return None


def measure(shapes: list[Shape], device: str, dtype: str, iters: int = 10, warmup: int = 3) -> list[float]:
    """Seconds per matmul for each shape (mean over ``iters`` after ``warmup``, device-synchronised)."""
    import time

    import torch

    dev = torch.device(device)
    tdt = getattr(torch, TORCH_DTYPES[dtype])
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    out = []
    gen = torch.Generator(device="cpu").manual_seed(0)
    for s in shapes:
        try:
            a = torch.randn(s.m, s.k, generator=gen).to(device=dev, dtype=tdt)
            b = torch.randn(s.k, s.n, generator=gen).to(device=dev, dtype=tdt)
            for _ in range(warmup):
                torch.matmul(a, b)
            sync()
        except (MemoryError, RuntimeError) as exc:   # torch.cuda.OutOfMemoryError is a RuntimeError
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if not isinstance(exc, MemoryError) and not any(
                    w in text.lower() for w in ("out of memory", "not enough memory", "allocate")):
                raise   # not about the size of the request (a driver fault): not bad input
            raise UserError(f"GEMM {s.label} ({s.m:,} x {s.k:,} @ {s.k:,} x {s.n:,}) does not fit in {dev}'s memory "
                            f"({text[:160]}): lower --tokens or --square, or set --max-dim") from None
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b)
        sync()
        out.append((time.perf_counter() - t0) / iters)
        del a, b
    return out


# ----------------------------------------------------------------------------- end to end

@dataclass
class GemmResult:
    base: str
    device: str
    device_name: str
    dtype: str
    peak_flops: float
    model: str | None
    shapes: list[Shape]
    seconds: list[float]
    params: dict[str, float]
    quality: dict[str, float]
    torch_version: str = ""
    date: str = ""

    def efficiencies(self) -> list[float]:
        return [2.0 * s.m * s.n * s.k / t / self.peak_flops for s, t in zip(self.shapes, self.seconds)]

    def to_dict(self) -> dict[str, Any]:
        eff = self.efficiencies()
        fitted = efficiency_curve(self.params, [s.m for s in self.shapes], [s.n for s in self.shapes],
                                  [s.k for s in self.shapes])
        return {
            "base": self.base, "device": self.device, "device_name": self.device_name, "dtype": self.dtype,
            "peak_flops": self.peak_flops, "model": self.model, "torch_version": self.torch_version, "date": self.date,
            "fit": {"params": self.params, **self.quality},
            "samples": [{"label": s.label, "m": s.m, "n": s.n, "k": s.k, "time_s": t,
                         "flops_per_s": 2.0 * s.m * s.n * s.k / t, "efficiency": e, "fitted": float(f)}
                        for s, t, e, f in zip(self.shapes, self.seconds, eff, np.atleast_1d(fitted))],
        }


def calibrate(plan: GemmPlan, shapes: list[Shape], device: str) -> GemmResult:
    import torch

    from llmpar.specs import load_hardware
    from llmpar.units import parse_flops

    hw = load_hardware(plan.hardware)
    peak = parse_flops(plan.peak, "--peak") if plan.peak is not None else hw.gpu.peak(plan.dtype)
    if plan.peak is not None and not peak >= 1e9:
        # a bare number is FLOP/s: --peak 1000 (meant as TFLOP/s) had divided by 1 kFLOP/s
        raise UserError(f"--peak {plan.peak}: {peak:g} FLOP/s is below any device's peak (1 GFLOP/s): a bare number "
                        "is FLOP/s, so a unit is probably missing (write e.g. '989 TFLOP/s')")
    seconds = measure(shapes, device, plan.dtype, plan.iters, plan.warmup)
    eff = [2.0 * s.m * s.n * s.k / t / peak for s, t in zip(shapes, seconds)]
    if max(eff) > 1.0:
        raise UserError(f"measured {max(eff):.2f} x the peak of {peak / 1e12:.1f} TFLOP/s: wrong --hardware or --dtype? "
                        "(give --peak)")
    start = hw.gpu.gemm.model_dump()
    params, quality = fit_curve([s.m for s in shapes], [s.n for s in shapes], [s.k for s in shapes], eff, start=start)
    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU {platform.machine()}"
    return GemmResult(base=plan.hardware, device=str(dev), device_name=name, dtype=plan.dtype, peak_flops=peak,
                      model=plan.model, shapes=shapes, seconds=seconds, params=params, quality=quality,
                      torch_version=str(torch.__version__),
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def profile_dict(result: GemmResult, name: str) -> dict[str, Any]:
    base = result.base
    if base.endswith((".yaml", ".yml")) or "/" in base:
        base = str(Path(base).resolve())
    d = result.to_dict()
    return {
        "name": name,
        "extends": base,
        "description": f"{result.base} with GEMM efficiency measured on {result.device_name} by llmpar calibrate gemm",
        "gpu": {"gemm": {k: float(f"{v:.7g}") for k, v in result.params.items()}},
        "calibration": {"gemm": {
            "tool": "llmpar calibrate gemm",
            "date": result.date,
            "device": result.device_name,
            "torch": result.torch_version,
            "dtype": result.dtype,
            "peak_flops": result.peak_flops,
            "model": result.model,
            "fit": d["fit"],
            "measurements": [[s["m"], s["n"], s["k"], round(s["time_s"], 9)] for s in d["samples"]],
        }},
    }


def write_profile(result: GemmResult, out: str | Path) -> Path:
    """Write the profile YAML and check that it loads (``extends:`` resolved, pydantic-valid)."""
    import yaml

    from llmpar.outputs import write_spec

    out = Path(out)
    doc = profile_dict(result, out.stem)
    text = ("# Written by `llmpar calibrate gemm`: the base profile with gpu.gemm fitted to measured matmuls.\n"
            + yaml.safe_dump(doc, sort_keys=False, width=120))
    return write_spec(out, text, "hardware")     # its folder exists: llmpar.outputs.check_out said so first
