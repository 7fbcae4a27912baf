"""Plan rows by layout, not by interleaving depth: tie groups that differ only in how many chunks
the interleaved schedule cuts each stage into (1F1B is the interleaved schedule at v = 1) are one
row, the best of them shown and the others its variants (newcomer review, item 17: `plan
llama-3-70b --gpus 16` filled rows 1-8 with one layout at v 40, 20, 10, ... and 1F1B).

A family is every knob but the schedule and ``virtual_stages``, with 1F1B and interleaved as one
schedule; ZB-H1, DualPipe and GPipe stay rows of their own (another schedule, not a depth). The
first group of a family in the ranking's order is its row; the rows are ranked 1, 2, ... in that
order. :class:`Families` finds them lazily (a plan shows a handful of the groups) and
:meth:`Families.rank_of_groups` numbers every group at once for the frontier. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from llmpar.parallel import SCHEDULES, Parallel

ONE_F_ONE_B, INTERLEAVED = SCHEDULES.index("1f1b"), SCHEDULES.index("interleaved")
# every Parallel field but schedule and virtual_stages, read from the dataclass: a new layout knob
# separates families without touching this file
_KNOBS = tuple(f.name for f in fields(Parallel) if f.name not in ("schedule", "virtual_stages"))


class Families:
    """The tie groups of a ranking (``groups``: :class:`llmpar.planner.ranking.TieGroups`) folded
    into rows; ``par``: the candidates, indexed as the groups index them."""

    def __init__(self, groups, par: Parallel):
        self.groups, self.par = groups, par
        self.rows: list[int] = []              # group index of each row, best first
        self.variants: dict[int, list[int]] = {}   # a row's group -> the groups folded into it
        self._row_of_key: dict[tuple, int] = {}
        self._next = 0

    def _value(self, name: str, i: int) -> int:
        x = getattr(self.par, name)
        return int(np.asarray(x).flat[i]) if np.ndim(x) else int(x)

    def key(self, g: int) -> tuple:
        """The family of group ``g``: its first layout's knobs, schedule depth aside."""
        i = int(self.groups[g][0])
        s, v = self._value("schedule", i), self._value("virtual_stages", i)
        depth = (ONE_F_ONE_B, 0) if s in (ONE_F_ONE_B, INTERLEAVED) else (s, v)
        return tuple(self._value(k, i) for k in _KNOBS) + depth

    def take(self, n: int) -> list[int]:
        """The first ``n`` rows' groups (fewer when the groups run out), scanning only as far as needed."""
        while len(self.rows) < n and self._next < len(self.groups):
            g = self._next
            self._next += 1
            k = self.key(g)
            if k in self._row_of_key:
                self.variants[self.rows[self._row_of_key[k]]].append(g)
            else:
                self._row_of_key[k] = len(self.rows)
                self.rows.append(g)
                self.variants[g] = []
        return self.rows[:n]

    def rank_of_groups(self) -> np.ndarray:
        """Every group's row rank (1-based; a folded group has its row's), computed at once: the
        knobs of each group's first layout as one row of a key table (exact: np.unique over the
        rows), the first group of each key its row. The same numbering :meth:`take` builds lazily."""
        order, starts = self.groups.order, self.groups.starts
        reps = order[starts[:-1]]
        n = reps.size
        if n == 0:
            return np.zeros(0, dtype=np.int64)

        def col(name):
            x = getattr(self.par, name)
            return (np.asarray(x)[reps] if np.ndim(x) else np.full(n, x)).astype(np.int64)

        s, v = col("schedule"), col("virtual_stages")
        fam = (s == ONE_F_ONE_B) | (s == INTERLEAVED)
        keys = np.stack([col(k) for k in _KNOBS] + [np.where(fam, ONE_F_ONE_B, s), np.where(fam, 0, v)], axis=1)
        _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        row_pos = first[inv.ravel()]                      # each group's row: the first group of its family
        is_row = row_pos == np.arange(n)
        return np.cumsum(is_row)[row_pos]
