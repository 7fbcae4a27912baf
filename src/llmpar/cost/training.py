"""Time, GPU-hours, energy and cost to train a token budget (docs/sweep.md).

Every function is arithmetic on floats *or* numpy arrays (docs/architecture.md: array-polymorphic), so a
sweep can pass one array entry per GPU count. Notation: T tokens to train on, R = tokens/s of the
layout (``llmpar.cost.step``), N GPUs, P_gpu the power drawn per GPU, PUE the facility's power
usage effectiveness (The Green Grid, White Paper #49: total facility energy / IT equipment energy).

    time            t = T / R                                  seconds (ideal: no restarts, no evals)
    days              = t / 86,400
    steps             = ceil(T / tokens per step)
    GPU-hours         = N x t / 3,600
    power per GPU   P_gpu = node_power / gpus_per_node         the GPU's board plus its share of the
                          = board_power + (node_power - gpus_per_node x board_power) / gpus_per_node
                                                               node (CPUs, memory, NICs, switches, fans)
    energy (MWh)      = GPU-hours x P_gpu [W] x PUE / 1e6       (Wh -> MWh)
    cost              = GPU-hours x price per GPU-hour          (the user's price, the user's currency)
    scaling efficiency  = (R_N / N) / (R_ref / N_ref)           tokens/s per GPU against a reference count

The powers in the shipped profiles are *maximum* figures (GPU TDP, the node's maximum system
power from its datasheet), so the energy is an upper bound for the IT equipment; a user who knows
the average draw gives it as ``power_per_gpu_w``. No price ships with llmpar.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmpar.errors import UserError
from llmpar.units import fmt_watts, text_float

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0
WH_PER_MWH = 1e6


# ---------------------------------------------------------------------------------- formulas

def train_time_s(tokens, tokens_per_s):
    """Seconds to process ``tokens`` at ``tokens_per_s`` (the step model's throughput)."""
    return tokens / tokens_per_s


def train_days(tokens, tokens_per_s):
    """Days to train: T / R / 86,400. Check: 15e12 tokens at 1.0e6 tokens/s = 173.6 days."""
    return train_time_s(tokens, tokens_per_s) / SECONDS_PER_DAY


def train_steps(tokens, tokens_per_step):
    """Optimizer steps to see ``tokens`` (the last step may be partial, so ceil)."""
    return np.ceil(tokens / tokens_per_step)


def gpu_hours(gpus, seconds):
    """GPU-hours: N x t / 3,600."""
    return gpus * seconds / SECONDS_PER_HOUR


def power_per_gpu_w(board_power_w, node_power_w=None, gpus_per_node=1):
    """Power drawn per GPU, W: the node's power over its GPUs (board + the node's non-GPU share),
    or the board power alone when no node power is known."""
    if node_power_w is None:
        return board_power_w * 1.0
    return node_power_w / gpus_per_node


def node_share_per_gpu_w(board_power_w, node_power_w, gpus_per_node):
    """The non-GPU part of the node per GPU, W: (node_power - gpus_per_node x board_power) / gpus_per_node."""
    return node_power_w / gpus_per_node - board_power_w


def energy_mwh(gpu_hours_, power_w, pue=1.0):
    """Energy, MWh: GPU-hours x W per GPU x PUE / 1e6."""
    return gpu_hours_ * power_w * pue / WH_PER_MWH


def training_cost(gpu_hours_, price_per_gpu_hour):
    """Cost in the price's currency: GPU-hours x price per GPU-hour."""
    return gpu_hours_ * price_per_gpu_hour


def scaling_efficiency(tokens_per_s, gpus, ref_tokens_per_s, ref_gpus):
    """Tokens/s per GPU relative to the reference's: 1.0 = perfect linear scaling."""
    return (tokens_per_s / gpus) / (ref_tokens_per_s / ref_gpus)


# ------------------------------------------------------------------------- for one result

# bounds of the cost options (reliability review, item 22: a 1e30 PUE printed 3.88e+19T MWh):
# beyond them an input is a typing slip. The largest token budget published is tens of trillions
# (Llama 3: 15.6T); the worst facility PUE reported is about 3; a GPU-hour price of a million; a
# GPU and its node share under 100 kW (the hardware profile's node_power is capped at 1 MW a node)
MAX_TOKENS = 1e16
MAX_PUE = 10.0
MAX_PRICE = 1e6
MAX_POWER_PER_GPU_W = 1e5


def parse_price(value, text) -> float:
    try:
        if isinstance(value, (bool, np.bool_)):   # True had been a price of 1 (float(True))
            raise TypeError
        v = text_float(value)
    except (TypeError, ValueError):
        raise UserError(f"--gpu-hour-price {text!r}: expected a price (2.5) or per profile (h100-sxm=2.5,b200=4.5)") \
            from None
    if not np.isfinite(v) or v <= 0 or v > MAX_PRICE:
        raise UserError(f"--gpu-hour-price {text!r}: a price must be positive and at most {MAX_PRICE:,.0f}")
    return v


def parse_prices(value):
    """A price per GPU-hour for every profile (2.5), or per profile ('h100-sxm=2.5,b200=4.5', or a
    dict): {canonical profile name: price}; each name must be a shipped profile or alias."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, str) and "=" in value:
        items = []
        for part in value.split(","):
            if "=" not in part:
                raise UserError(f"--gpu-hour-price {value!r}: {part.strip()!r} is not PROFILE=PRICE")
            k, v = part.split("=", 1)
            items.append((k.strip(), v.strip()))
    else:
        return parse_price(value, value)
    from llmpar.specs.registry import resolved_name, shipped_names

    out: dict[str, float] = {}
    for k, v in items:
        name, _ = resolved_name(k, "hardware")
        if name not in shipped_names("hardware") and not str(k).endswith((".yaml", ".yml")):
            raise UserError(f"--gpu-hour-price: {k!r} is not a hardware profile (`llmpar hardware` lists them)")
        if name in out:
            raise UserError(f"--gpu-hour-price: {k!r} is priced twice")
        out[name] = parse_price(v, value)
    return out


def price_for(prices, hw):
    """The price of ``hw`` from parse_prices' result (None where a map does not name it)."""
    if prices is None or not isinstance(prices, dict):
        return prices
    return prices.get(hw.name)


def check_prices_used(prices, hws) -> None:
    """A per-profile price map naming a profile the command does not run is a typo or a forgotten
    --hardware, not something to ignore (newcomer review: `sweep --hardware h100-sxm
    --gpu-hour-price h100-sxm=2,b200=4` dropped b200's price without a word): UserError."""
    if not isinstance(prices, dict):
        return
    run = {h.name for h in hws}
    unused = [k for k in prices if k not in run and not str(k).endswith((".yaml", ".yml"))]
    if unused:
        raise UserError(f"--gpu-hour-price prices {', '.join(unused)}, which this command does not run "
                        f"(--hardware {','.join(sorted(run))}); add it to --hardware or drop its price")


MAX_FAILURE_RATE = 1.0      # failures per GPU-hour: one per GPU every hour is already no training
# and below one failure per 10^12 GPU-hours (a million GPUs for a century see ~0.9) the time between
# failures overflows nothing but means nothing either: 1e-308 made it inf and the goodput nan
MIN_FAILURE_RATE = 1e-12
MAX_RESTART_S = 7 * 86_400.0
MIN_CHECKPOINT_BYTES_PER_S, MAX_CHECKPOINT_BYTES_PER_S = 1e6, 1e14   # per node: a disk's floor, 800 NICs' ceiling


def parse_inputs(tokens=None, pue=None, gpu_hour_price=None, power_per_gpu=None, failure_rate=None,
                 restart_time=None, checkpoint_bandwidth=None, checkpoint=None) -> dict[str, Any]:
    """The inputs as numbers: tokens '15T' / '300B' / 2.5e12 (units.parse_count), PUE >= 1,
    price > 0, power '900 W' (units.parse_power), each within its MAX_* bound; the goodput inputs
    (cost/goodput.py): failures per GPU-hour, restart time ('10min', '600 s'), checkpoint bandwidth
    per node ('25 GB/s'), checkpoint mode sync | async. Raises UserError (exit 2) for bad values."""
    from llmpar.cost.goodput import MODES
    from llmpar.units import parse_count, parse_power, parse_seconds

    out: dict[str, Any] = {"tokens": None, "pue": None, "gpu_hour_price": None, "power_per_gpu_w": None,
                           "failure_rate": None, "restart_s": None, "checkpoint_bandwidth": None, "checkpoint": None}
    for name, v in (("tokens", tokens), ("pue", pue), ("gpu-hour-price", gpu_hour_price),
                    ("power-per-gpu", power_per_gpu), ("failure-rate", failure_rate), ("restart-time", restart_time),
                    ("checkpoint-bandwidth", checkpoint_bandwidth)):
        if isinstance(v, (bool, np.bool_)):   # pue=True had been a PUE of 1.0 (float(True)): a number, not a flag
            raise UserError(f"--{name} takes a number, got {v!r}")
    if failure_rate is not None:
        try:
            value = text_float(failure_rate)
        except (TypeError, ValueError):
            raise UserError(f"--failure-rate must be failures per GPU-hour (e.g. 2e-5), got {failure_rate!r}") from None
        if not np.isfinite(value) or value < MIN_FAILURE_RATE or value > MAX_FAILURE_RATE:
            raise UserError(f"--failure-rate must be failures per GPU-hour in [{MIN_FAILURE_RATE:g}, "
                            f"{MAX_FAILURE_RATE:g}] (Llama 3: 2.0e-5), got {failure_rate!r}")
        out["failure_rate"] = value
    if restart_time is not None:
        # units read in any case ('10 MIN'); a refusal echoes the value as typed, not lowercased
        try:
            out["restart_s"] = parse_seconds(str(restart_time).strip().lower(), "--restart-time")
        except UserError:
            out["restart_s"] = parse_seconds(str(restart_time).strip(), "--restart-time")
        if out["restart_s"] > MAX_RESTART_S:
            raise UserError(f"--restart-time {restart_time} is above a week: a typing slip?")
    if checkpoint_bandwidth is not None:
        from llmpar.units import parse_per_direction_bandwidth, refuse_bare_small

        # a write is one direction: '2 GB/s bidirectional' is 1 GB/s of it (docs/architecture.md,
        # Units); the qualifier had been dropped
        bw = parse_per_direction_bandwidth(checkpoint_bandwidth, "--checkpoint-bandwidth")
        refuse_bare_small(checkpoint_bandwidth, bw, 1e6, "--checkpoint-bandwidth", "GB/s")
        if not MIN_CHECKPOINT_BYTES_PER_S <= bw <= MAX_CHECKPOINT_BYTES_PER_S:
            # 1e-300 GB/s had made the checkpoint stall infinite and printed "goodput nan %"
            raise UserError(f"--checkpoint-bandwidth {checkpoint_bandwidth}: a node writes its checkpoint shard at "
                            "1 MB/s to 100 TB/s (hardware profiles' host links are at least 0.1 GB/s)")
        out["checkpoint_bandwidth"] = bw
    if checkpoint is not None:
        if checkpoint not in MODES:
            raise UserError(f"--checkpoint must be one of {', '.join(MODES)}, got {checkpoint!r}")
        out["checkpoint"] = checkpoint
    if tokens is not None:
        out["tokens"] = parse_count(tokens, "--tokens")
        if out["tokens"] > MAX_TOKENS:
            raise UserError(f"--tokens {tokens} is above {MAX_TOKENS:.0e} (10,000T) tokens: a typing slip?")
    if pue is not None:
        try:
            value = text_float(pue)
        except (TypeError, ValueError):
            raise UserError(f"--pue must be a number >= 1, got {pue!r}") from None
        if not np.isfinite(value) or value < 1.0 or value > MAX_PUE:
            raise UserError(f"--pue must be a number from 1 to {MAX_PUE:g} (facility energy / IT energy), got {pue!r}")
        out["pue"] = value
    if gpu_hour_price is not None:
        out["gpu_hour_price"] = parse_prices(gpu_hour_price)
    if power_per_gpu is not None:
        out["power_per_gpu_w"] = parse_power(power_per_gpu, "--power-per-gpu")
        if out["power_per_gpu_w"] > MAX_POWER_PER_GPU_W:
            raise UserError(f"--power-per-gpu {power_per_gpu} is above {MAX_POWER_PER_GPU_W / 1e3:g} kW per GPU: a "
                            "typing slip?")
    given = [k for k in ("pue", "gpu_hour_price", "power_per_gpu_w", "failure_rate", "restart_s",
                         "checkpoint_bandwidth", "checkpoint") if out[k] is not None]
    if out["tokens"] is None and given:
        raise UserError("--pue, --gpu-hour-price, --power-per-gpu, --failure-rate, --restart-time, "
                        "--checkpoint-bandwidth and --checkpoint need --tokens (the token budget to train on)")
    return out


def parse_deadline(text) -> float:
    """'90d', '12w', '2160h' -> days; a bare number is refused (90 what?)."""
    t = str(text).strip().lower()
    scale = {"d": 1.0, "w": 7.0, "h": 1.0 / 24.0}
    if not t or t[-1] not in scale:
        what = "give a unit" if not t or t[-1].isdigit() or t[-1] == "." else "in days, weeks or hours"
        raise UserError(f"--deadline {text!r}: {what}: 90d, 12w or 2160h")
    try:
        v = float(t[:-1]) * scale[t[-1]]
    except ValueError:
        raise UserError(f"--deadline {text!r}: expected a number of days, weeks or hours, e.g. 90d") from None
    if not np.isfinite(v) or v <= 0 or v > 36_500:
        raise UserError(f"--deadline {text!r}: must be a positive time up to 100 years")
    return v


def checkpoint_bytes_of(model, settings) -> float:
    """Bytes of one checkpoint a restart needs: every parameter's 16-bit weight and optimizer
    states, Ψ·(weights + optimizer) bytes (ZeRO §3.1: 2Ψ + 12Ψ for mixed-precision Adam). Under
    LoRA / QLoRA only the adapters train: a restart reloads the frozen base from where it came and
    needs the adapters' weights and optimizer states, A·(weights + optimizer) (cost/finetune.py)."""
    from llmpar.cost.params import total_params
    from llmpar.cost.states import bytes_per_param

    b = bytes_per_param(settings)
    n = float(total_params(model))
    if getattr(settings, "finetune", "full") != "full":
        from llmpar.cost import finetune as FT

        n = (model.dense_layers * FT.adapter_params_per_layer(model, False, settings.lora_targets, settings.lora_rank)
             + model.moe_layers * FT.adapter_params_per_layer(model, True, settings.lora_targets, settings.lora_rank))
    return n * (float(b.weights) + float(b.optimizer))


def goodput_of(hw, gpus, checkpoint_bytes, train_in: dict[str, Any] | None) -> dict[str, Any]:
    """cost/goodput.py's figures for ``gpus`` GPUs of ``hw`` with the given (or default) inputs,
    and the assumptions behind them."""
    from llmpar.cost import goodput as G

    t = train_in or {}
    rate = t.get("failure_rate") or G.LLAMA3_FAILURES_PER_GPU_HOUR
    restart = G.DEFAULT_RESTART_S if t.get("restart_s") is None else t["restart_s"]
    mode = t.get("checkpoint") or "sync"
    nic = hw.tiers[-1].bandwidth if hw.tiers else 50e9
    per_node = t.get("checkpoint_bandwidth") or nic * hw.gpus_per_node
    host = (hw.host_bandwidth or 32e9) / max(1, hw.gpus_per_host_link)
    g = G.estimate(gpus=gpus, gpus_per_node=hw.gpus_per_node, checkpoint_bytes=checkpoint_bytes,
                   per_node_bytes_per_s=per_node, host_bytes_per_s_per_gpu=host, failures_per_gpu_hour=rate,
                   restart_s=restart, mode=mode)
    notes = [
        f"failures: {rate:.3g} per GPU-hour" + (" (--failure-rate)" if t.get("failure_rate") else
                                                f", {G.LLAMA3_SOURCE}") + f": the job fails every "
        f"{float(np.min(g['mtbf_s'])) / 3600:.3g} h",
        f"checkpoints: {checkpoint_bytes / 1e12:.3g} TB (16-bit weights + optimizer states), {mode}, at "
        f"{per_node / 1e9:.3g} GB/s per node" + (" (--checkpoint-bandwidth)" if t.get("checkpoint_bandwidth") else
                                                 " (the node's scale-out NICs: an assumption)")
        + f", at most {G.TECTONIC_BYTES_PER_S / 1e12:g} TB/s in all (Meta's Tectonic, Llama 3 §3.3.1); "
        f"Young/Daly interval",
        f"restart: {restart / 60:.3g} min from a failure to training again"
        + (" (--restart-time)" if t.get("restart_s") is not None else " (an assumption; --restart-time)"),
    ]
    return {k: (v if np.ndim(v) else float(v)) if not isinstance(v, str) else v for k, v in g.items()} | \
        {"assumptions": notes}


def estimate(hw, *, tokens: float, tokens_per_s, gpus, tokens_per_step=None, pue: float | None = None,
             gpu_hour_price: float | None = None, power_per_gpu_w: float | None = None,
             checkpoint_bytes: float | None = None, train_in: dict[str, Any] | None = None) -> dict[str, Any]:
    """Days, GPU-hours, energy and cost to train ``tokens`` on ``gpus`` GPUs of profile ``hw``.

    Power: ``power_per_gpu_w`` if given (an average the user measured), else the profile's
    ``node_power / gpus_per_node`` (maximum), else its ``gpu.board_power`` alone (maximum, GPU
    boards only), else unknown (energy None). Price: ``gpu_hour_price`` if given, else the
    profile's ``gpu_hour_price`` (a user's profile), else None (cost None). The JSON object of
    ``training`` in `plan`, `step` and `sweep` rows.
    """
    pue_value = 1.0 if pue is None else float(pue)
    if tokens_per_step is not None and tokens < tokens_per_step:
        raise UserError(f"--tokens {tokens:,.6g} is less than one step's {tokens_per_step:,.0f} tokens (global batch x seq): "
                        f"a token budget covers whole steps")
    t = train_time_s(tokens, tokens_per_s)
    hours = gpu_hours(gpus, t)
    notes: list[str] = []
    board = hw.gpu.board_power
    node = hw.node_power
    if power_per_gpu_w is not None:
        power, basis = float(power_per_gpu_w), "given"
        notes.append(f"power: {fmt_watts(power)} W per GPU as given (--power-per-gpu)")
    elif node is not None:
        power, basis = float(power_per_gpu_w_of(hw)), "max_node"
        share = f"{board:,.0f} W GPU board + {node / hw.gpus_per_node - board:,.0f} W node share" if board else \
            "node share"
        notes.append(f"power: {power:,.0f} W per GPU = {node / 1e3:g} kW max node power / {hw.gpus_per_node} GPUs "
                     f"({share}): maximum, an upper bound (--power-per-gpu for a measured average)")
    elif board is not None:
        power, basis = float(board), "max_board"
        notes.append(f"power: {board:,.0f} W per GPU, the GPU's board power only (the profile states no node_power): "
                     "maximum, and without CPUs, NICs, switches and fans")
    else:
        power, basis = None, None
        notes.append(f"energy unknown: hardware {hw.name} states neither gpu.board_power nor node_power "
                     "(--power-per-gpu to give one)")
    if power is not None:
        notes.append(f"PUE {pue_value:g}" + (": IT equipment only, the facility's cooling and losses excluded "
                                             "(--pue to include them)" if pue is None else " (--pue)"))
    mapped = isinstance(gpu_hour_price, dict)
    gpu_hour_price = price_for(gpu_hour_price, hw)
    price, price_source = gpu_hour_price, "--gpu-hour-price" if gpu_hour_price is not None else None
    if mapped and price is None and getattr(hw, "gpu_hour_price", None) is None:
        notes.append(f"cost: --gpu-hour-price names no price for {hw.name}")
    if price is None and getattr(hw, "gpu_hour_price", None) is not None:
        price, price_source = float(hw.gpu_hour_price), f"hardware profile {hw.name}"
    if price is None:
        notes.append("cost: no price (--gpu-hour-price, or gpu_hour_price in your hardware profile)")
    energy = None if power is None else energy_mwh(hours, power, pue_value)
    good = None
    if checkpoint_bytes is not None:
        good = goodput_of(hw, gpus, checkpoint_bytes, train_in)
        g = good["goodput"]
        good["effective_days"] = None if g <= 0 else train_days(tokens, tokens_per_s) / g
        good["effective_gpu_hours"] = None if g <= 0 else hours / g
        good["effective_energy_mwh"] = None if (g <= 0 or energy is None) else energy / g
        good["effective_cost"] = None if (g <= 0 or price is None) else training_cost(hours, price) / g
        good["effective_cost_per_million_tokens"] = (None if good["effective_cost"] is None
                                                     else good["effective_cost"] / tokens * 1e6)
    return {
        "goodput": good,
        "tokens": tokens,
        "tokens_per_s": tokens_per_s,
        "steps": None if tokens_per_step is None else _int(train_steps(tokens, tokens_per_step)),
        "train_time_s": t,
        "days": train_days(tokens, tokens_per_s),
        "gpu_hours": hours,
        "power_per_gpu_w": power,
        "power_basis": basis,
        "board_power_w": board,
        "node_power_w": node,
        "pue": pue_value,
        "energy_mwh": energy,
        "gpu_hour_price": price,
        "price_source": price_source,
        "cost": None if price is None else training_cost(hours, price),
        "cost_per_million_tokens": None if price is None else training_cost(hours, price) / tokens * 1e6,
        "assumptions": notes,
    }


def _int(x):
    return int(x) if np.ndim(x) == 0 else np.asarray(x, dtype=np.int64)


def power_per_gpu_w_of(hw):
    """The profile's maximum power per GPU (node share included when the profile states node_power)."""
    board, node = hw.gpu.board_power, hw.node_power
    if node is not None:
        return power_per_gpu_w(board, node, hw.gpus_per_node)
    return board


__all__ = ["parse_deadline", "parse_price", "parse_prices", "price_for", "checkpoint_bytes_of", "energy_mwh", "estimate", "goodput_of", "gpu_hours", "node_share_per_gpu_w", "parse_inputs", "power_per_gpu_w",
           "power_per_gpu_w_of", "scaling_efficiency", "train_days", "train_steps", "train_time_s", "training_cost"]
