"""The explained term: one line of ``--explain`` (memory and step alike) and of ``--json``'s
``terms``: the component it belongs to, what it is, its value, the formula, the values put into
the formula, and the source (docs/architecture.md, every number can show its work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Term:
    component: str
    name: str
    value: float
    formula: str
    values: str
    source: str
    unit: str = "bytes"      # "bytes" (memory) or "s" (step time)
    counted: bool = True     # False: a part shown for its formula (one layer's), not added into its component

    @property
    def bytes(self) -> float:
        """Memory's name for the value (memory terms are in bytes)."""
        return self.value

    def as_dict(self) -> dict[str, Any]:
        out = {"component": self.component, "name": self.name,
               ("bytes" if self.unit == "bytes" else "seconds"): self.value,
               "formula": self.formula, "values": self.values, "source": self.source}
        if self.unit != "bytes":
            out["counted"] = self.counted
        return out
