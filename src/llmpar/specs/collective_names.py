"""The collectives llmpar knows by name, and the spellings it accepts for them (``allreduce``,
``a2a``, ``p2p`` ...): one home below both the hardware specs (a tier's per-collective fit,
``Tier.collectives``) and the collective model (cost/collectives.py), which re-exports them."""

from __future__ import annotations

from llmpar.errors import UserError, suggest

COLLECTIVES = (
    "broadcast", "scatter", "gather", "reduce", "all_reduce", "all_gather", "reduce_scatter",
    "all_to_all", "send_recv",
)
_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "a2a": "all_to_all", "sendrecv": "send_recv", "p2p": "send_recv",
    "bcast": "broadcast",
}


def normalize_collective(name: str) -> str:
    key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
    key = _ALIASES.get(key.replace("_", ""), key)
    if key not in COLLECTIVES:
        raise UserError(f"unknown collective {name!r}{suggest(key, COLLECTIVES)}; choose one of: {', '.join(COLLECTIVES)}")
    return key
