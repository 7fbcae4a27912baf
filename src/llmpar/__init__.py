"""llmpar: plan distributed LLM training on paper (memory, step time, layouts).

Kept import-free so that ``llmpar --help`` stays fast: ``llmpar.plan`` (the planner, callable as
``llmpar.plan(model, gpus=...)``) is imported on first use.
"""


def __getattr__(name):
    if name == "plan":
        import importlib

        return importlib.import_module("llmpar.plan")
    raise AttributeError(f"module 'llmpar' has no attribute {name!r}")
