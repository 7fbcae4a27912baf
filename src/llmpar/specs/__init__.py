"""Specs: pydantic models for hardware and LLM shapes, and the registry that loads them."""

from llmpar.specs.hardware import Accelerator, Hardware, Tier
from llmpar.specs.model import MLASpec, ModelSpec, MoESpec
from llmpar.specs.registry import load_hardware, load_model, shipped_names

__all__ = [
    "Accelerator", "Hardware", "Tier", "MLASpec", "ModelSpec", "MoESpec",
    "load_hardware", "load_model", "shipped_names",
]
