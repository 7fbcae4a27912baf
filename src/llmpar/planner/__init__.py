"""The planner: which TP/PP/DP/CP/EP layout (and micro-batch, schedule, ZeRO, recompute, SP) is
best for N GPUs — every candidate evaluated through :mod:`llmpar.cost` on numpy arrays.

    >>> import llmpar
    >>> r = llmpar.plan("llama-3-70b", gpus=2048)        # the function, from llmpar.api
    >>> r.plans[0].parallel.tp, r.plans[0].step_time_s, r.space.feasible

:mod:`llmpar.planner.space` enumerates candidates and masks the constraints;
:mod:`llmpar.planner.search` evaluates, ranks and builds the result objects (:mod:`llmpar.results`);
:mod:`llmpar.planner.sweep` plans a list of GPU counts on several hardware profiles.

The function is ``llmpar.plan`` (:func:`llmpar.api.plan`); this package is ``llmpar.planner``
(no subpackage shares a name with an API function).
"""
