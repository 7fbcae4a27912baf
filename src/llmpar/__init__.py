"""llmpar: plan distributed LLM training on paper (memory, step time, layouts).

The Python API (docs/api.md), the same computations as the CLI:

    >>> import llmpar
    >>> r = llmpar.memory("llama-3-70b", hardware="h100-sxm", zero=3, dp=8)
    >>> r.fits, r.model_dump()["memory"]["total_bytes"]
    >>> best = llmpar.plan("llama-3-70b", gpus=512).best

``load_model``, ``load_hardware``, ``load_stack``, ``memory``, ``step``, ``plan``, ``sweep``,
``collective`` and ``validate`` live in :mod:`llmpar.api` and are imported on first use, so
``import llmpar`` (and ``llmpar --help``) loads neither numpy nor pydantic nor rich.
"""

_API = ("load_model", "load_hardware", "load_stack", "memory", "step", "plan", "sweep", "collective", "validate",
        "serve", "serve_plan")

# The planner and the published-run validation live in the subpackages llmpar.planner and
# llmpar.validation: no subpackage shares a name with an API function (issue 24).


def __getattr__(name: str):
    if name in _API:
        from llmpar import api

        value = getattr(api, name)
        globals()[name] = value          # resolved once
        return value
    raise AttributeError(f"module 'llmpar' has no attribute {name!r}")


def __dir__():
    return sorted({n for n in globals() if not n.startswith("_")} | set(_API))


__all__ = list(_API)
