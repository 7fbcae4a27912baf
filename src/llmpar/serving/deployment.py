"""The options of `llmpar serve`, checked: the deployment, the load and the length ranges.

docs/serving.md. :func:`deployment` resolves the degrees (tp, pp, ep, replicas) and the precisions,
speculative decoding, prefix cache and data-parallel attention of one deployment into a
:class:`Deployment`; the parsers below turn the load's options (whole numbers, shares, LO-HI ranges,
a rate) into values or refuse them in one line. :mod:`llmpar.serving.run` runs what they describe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmpar.cost.serving import KV_DTYPES, WEIGHT_DTYPES
from llmpar.errors import UserError
from llmpar.units import text_float

LOADS = ("concurrency", "rate", "batch")
MAX_REQUESTS = 10_000_000
#: --max-num-batched-tokens, in `serve` and in `serve-plan`'s list alike (they had disagreed: 1 and 16)
BUDGET_RANGE = (1, 1_048_576)
#: request lengths when none are given (`serve`, `serve-plan` and the API alike; a keyword's None is this)
DEFAULT_ISL, DEFAULT_OSL = 1024, 128


@dataclass
class Deployment:
    """One serving deployment: ``replicas`` engine instances of tp x pp GPUs each."""

    gpus: int
    tp: int
    pp: int
    ep: int
    replicas: int
    weights: str
    kv_dtype: str
    spec_tokens: int = 0        # speculative decoding: draft tokens per step
    acceptance: float = 0.0     # ... each accepted with this probability
    prefix_hit: float = 0.0     # share of each prompt served from the prefix cache
    dp_attention: bool = False  # attention data-parallel over the tp GPUs, experts over all of them

    def dep(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep, "weights": self.weights, "kv_dtype": self.kv_dtype,
                "spec_tokens": self.spec_tokens, "acceptance": self.acceptance, "prefix_hit": self.prefix_hit,
                "dp_attention": self.dp_attention}


def _int(value, name: str, lo: int = 1, hi: int = MAX_REQUESTS, why: str = "") -> int | None:
    """A whole number in [lo, hi]; ``why``: what sets the upper bound, said when it binds. What is a
    whole number is the API's one rule (:func:`llmpar.parallel.whole`: an int, a numpy integer or a
    whole float; never a bool); ``np.int64(8)`` had been refused as "not a whole number"."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        v = int(value)
    elif isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        v = int(value)
    else:
        raise UserError(f"--{name.replace('_', '-')} must be a whole number, got {value!r}")
    if not lo <= v <= hi:
        limit = f" ({why})" if why and v > hi else ""
        raise UserError(f"--{name.replace('_', '-')} must be between {lo:,} and {hi:,}{limit}, got {v:,}"
                        if v < 10**15 else f"--{name.replace('_', '-')} {v:.3g} is out of range: at most {hi:,}{limit}")
    return v


def _share(value, name: str, top_open: bool) -> float:
    if value is None:
        return 0.0
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or not (0.0 <= value < 1.0 if top_open else 0.0 <= value <= 1.0):
        raise UserError(f"--{name} must be a share between 0 and {'1 (exclusive)' if top_open else '1'}, got {value!r}")
    return float(value)


def deployment(model, hw, *, gpus=None, tp=None, pp=None, ep=None, weights="bf16", kv_dtype=None, spec_tokens=None,
               acceptance=None, prefix_hit=None, dp_attention=False) -> Deployment:
    """Resolve the degrees: tp defaults to the largest that divides the heads and gpus / pp, within
    a node (one replica of tp x pp, or gpus / (tp x pp) of them: --gpus 12 of Llama 3 70B is 3 x tp 4;
    tp = gpus had been taken and refused as "--tp 12" the user never gave), gpus to tp x pp; ep 1
    (experts sharded over TP) or a divisor of tp (experts over ep groups of tp/ep ranks; vLLM
    --enable-expert-parallel is ep = tp)."""
    if weights not in WEIGHT_DTYPES:
        raise UserError(f"unknown --weights {weights!r}; choose one of: {', '.join(WEIGHT_DTYPES)}")
    kv = kv_dtype or "bf16"   # vLLM --kv-cache-dtype auto: the model's 16-bit dtype, fp8 weights or not
    if kv not in KV_DTYPES:
        raise UserError(f"unknown --kv-dtype {kv!r}; choose one of: {', '.join(KV_DTYPES)}")
    gpus, tp, pp, ep = (_int(x, n, 1, 1_048_576) for x, n in ((gpus, "gpus"), (tp, "tp"), (pp, "pp"), (ep, "ep")))
    pp = pp or 1
    if tp is None:
        if gpus and gpus % pp:
            raise UserError(f"--gpus {gpus} is not a multiple of --pp {pp}")
        per = gpus // pp if gpus else 1
        tp = next(t for t in range(min(per, hw.gpus_per_node), 0, -1) if model.heads % t == 0 and per % t == 0)
    if gpus is None:
        gpus = tp * pp
    if gpus % (tp * pp):
        raise UserError(f"--gpus {gpus} is not a multiple of tp x pp = {tp} x {pp} = {tp * pp}")
    if model.heads % tp:
        raise UserError(f"--tp {tp} does not divide the model's {model.heads} attention heads")
    if model.layers < pp:
        raise UserError(f"--pp {pp} exceeds the model's {model.layers} layers")
    given_ep, ep = ep, ep or 1
    if ep > 1 and model.moe is None:
        raise UserError(f"--ep {ep} needs a mixture-of-experts model; {model.name} is dense")
    if ep > 1 and tp % ep:
        raise UserError(f"--ep {ep}: expert parallelism is carved out of the TP ranks of a replica (vLLM "
                        f"--enable-expert-parallel: ep = tp; TRT-LLM --ep: tp/ep ranks per expert); {ep} does not "
                        f"divide --tp {tp}")
    if model.moe is not None and ep > 1 and model.moe.experts % ep:
        raise UserError(f"--ep {ep} does not divide the model's {model.moe.experts} experts")
    if dp_attention:
        if model.moe is None:
            raise UserError(f"--dp-attention runs attention data-parallel beside expert-parallel MoE layers; "
                            f"{model.name} is dense (serve replicas with --gpus instead)")
        if tp < 2:
            raise UserError("--dp-attention spreads one replica's sequences over its GPUs: give --tp 2 or more")
        if pp > 1:
            raise UserError("--dp-attention with --pp is not modelled: give --pp 1")
        if given_ep is not None and given_ep != tp:   # --ep 1 too: it had been taken and replaced by tp
            raise UserError(f"--dp-attention spreads the experts over all {tp} GPUs of the replica: leave --ep out "
                            f"(or give --ep {tp}), not --ep {given_ep}")
        ep = tp
    k, a = speculation(spec_tokens, acceptance)
    return Deployment(gpus, tp, pp, ep, gpus // (tp * pp), weights, kv, k, a, _share(prefix_hit, "prefix-hit", True),
                      bool(dp_attention))


def refuse_speculation_without_decode(spec_tokens, osl) -> None:
    """``--spec-tokens`` with one-token answers: speculative decoding drafts the tokens after the
    first, and a one-token answer has none, so the option would change nothing (it had been taken:
    serve's figures were those without it). One check for `serve` and `serve-plan`."""
    if spec_tokens and osl is not None and float(osl) <= 1.0:
        raise UserError("--spec-tokens with --osl 1: speculative decoding drafts the tokens after the first, and "
                        "a one-token answer has none (give --osl 2 or more, or leave --spec-tokens out)")


def speculation(spec_tokens, acceptance) -> tuple[int, float]:
    """(draft tokens, acceptance) of ``--spec-tokens K --acceptance A``, checked once for `serve` and
    `serve-plan`: K in 0..16; an acceptance needs drafts and drafts an acceptance (0, 0.0: none)."""
    k = _int(spec_tokens, "spec_tokens", 0, 16) or 0
    if acceptance is not None and not k:
        raise UserError("--acceptance is the draft tokens' acceptance rate: give --spec-tokens K with it")
    if k and acceptance is None:
        raise UserError(f"--spec-tokens {k}: give --acceptance, the share of draft tokens the target accepts "
                        "(published EAGLE/MTP rates are 0.6-0.9; the engine's metrics report it)")
    return k, _share(acceptance, "acceptance", False)


def _load_kind(concurrency, rate, batch, prompts):
    given = [n for n, v in (("concurrency", concurrency), ("rate", rate), ("batch", batch)) if v is not None]
    if len(given) > 1:
        raise UserError(f"give one load, not {' and '.join('--' + g for g in given)}")
    kind = given[0] if given else "rate"
    if prompts is not None and kind != "rate":
        raise UserError("--prompts is the request count of a --rate run (inf: all at once); it changes nothing "
                        f"with --{kind}")
    return kind


def _range(value, option: str, top: int) -> tuple[int, int]:
    """--isl-range / --osl-range: "LO-HI" or (lo, hi), 1 <= lo <= hi <= the model's context."""
    if isinstance(value, str):
        parts = value.replace(" ", "").split("-")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise UserError(f"--{option} {value!r}: expected LO-HI in tokens, e.g. 512-1536")
        lo, hi = int(parts[0]), int(parts[1])
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in value):
        lo, hi = int(value[0]), int(value[1])
    else:
        raise UserError(f"--{option} {value!r}: expected LO-HI in tokens, e.g. 512-1536")
    if not 1 <= lo <= hi <= top:
        raise UserError(f"--{option} {lo}-{hi}: needs 1 <= LO <= HI <= the model's context of {top:,}")
    return lo, hi


# a request rate beyond a million per second is a typing slip for one deployment (the largest
# published serving rows run tens per second per replica); below one a day it rounds every figure
# to nothing (reliability re-check 2026-12-03: --rate 1e308 overflowed numpy before the verdict)
MAX_RATE = 1e6
MIN_RATE = 1.0 / 86400.0


def _rate(text, allow_inf: bool = True) -> float:
    """A request rate (requests/s, or inf for `serve`'s offline load; ``allow_inf`` False:
    serve-plan's, which sizes for a finite one and says so in its messages): a number or its text.
    A bool, an array or a complex number is refused as concurrency's are (numpy had raised a
    TypeError at np.array([1, 2]), and True had been a rate of 1)."""
    if isinstance(text, (bool, np.bool_)) or not isinstance(text, (int, float, str, np.integer, np.floating)):
        raise UserError(f"rate {text!r}: expected requests per second, a number (e.g. 4 or 0.5)"
                        + (" or 'inf'" if allow_inf else ""))
    t = str(text).strip().lower()
    inf = ", or inf" if allow_inf else ""
    if t in ("inf", "infinity", "offline"):
        if not allow_inf:
            raise UserError("--rate inf: serve-plan sizes a deployment for a finite rate (requests/s)")
        return math.inf
    try:
        v = text_float(t.removesuffix("/s"))
    except ValueError:
        raise UserError(f"--rate {text!r}: expected requests per second (e.g. 4 or 0.5){inf}") from None
    if not math.isfinite(v) or v <= 0:
        raise UserError(f"--rate {text!r}: expected a positive number of requests per second{inf}")
    if not MIN_RATE <= v <= MAX_RATE:
        raise UserError(f"--rate {text!r}: between one request a day ({MIN_RATE:.3g}/s) and {MAX_RATE:,.0f} "
                        f"requests per second{inf}")
    return v
