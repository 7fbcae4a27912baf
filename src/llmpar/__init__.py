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

# ``llmpar.plan`` and ``llmpar.validate`` are the API functions, but they are also the names of two
# subpackages (the planner, the published-run validation). Python binds a subpackage as an attribute
# of its parent the first time it is imported, which would hide the function. Both packages'
# __init__ files are import-free: import them here, once, and drop that binding, so that the
# attribute resolves to the function (``__getattr__`` below) and a later ``import llmpar.plan.search``
# (already-loaded parent) never rebinds it. Import their modules with ``from llmpar.plan import search``.
# (This import must come before ``__getattr__`` is defined: ``from llmpar import plan`` asks for the
# attribute first, and ``__getattr__`` would answer with the function.)
from llmpar import plan, validate  # noqa: E402, I001

del plan, validate


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
