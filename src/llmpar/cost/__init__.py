"""Cost formulas: pure functions, no I/O, no printing, array-polymorphic.

One formula, one place (docs/architecture.md, rules of the house): every count llmpar reports — parameters,
memory, FLOPs, collective and step times — is computed by a function in this package, and the CLI,
the planner, calibration and validation all call the same function. Functions that depend on
parallel degrees take them from a :class:`llmpar.parallel.Parallel`, whose fields may be Python
ints or numpy arrays, so the planner can evaluate every candidate layout at once.

Modules: ``params`` (exact parameter counts per component), ``memory`` (per-stage assembly; built
from ``states``, ``activations``, ``inflight``, ``runtime``, with ``inference`` and ``memory_explain``),
``flops``, ``compute``,
``collectives``, ``topology``, ``comm``, ``pipeline``, ``step``.
"""
