"""What the validation modules share below them: the metric families and where the published
tables live (core.py reads and predicts them; crossval.py and fit_plans.py build on both)."""

from __future__ import annotations

from pathlib import Path

SPEED_METRICS = ("step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu")
MEMORY_METRICS = ("peak_reserved_bytes", "peak_allocated_bytes")


def validation_dir() -> Path:
    """The shipped published-run tables (``validation/`` in a checkout, the package data otherwise)."""
    from llmpar.specs.registry import data_dir

    return data_dir("validation")
