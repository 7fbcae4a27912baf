"""Specs: pydantic models for hardware and LLM shapes, and the registry that loads them."""

from llmpar.specs.hardware import Accelerator, Hardware, Tier
from llmpar.specs.model import MLASpec, ModelSpec, MoESpec
from llmpar.specs.registry import load_hardware, load_model, load_stack, shipped_names
from llmpar.specs.stack import Stack

__all__ = [
    "Accelerator", "Hardware", "Tier", "MLASpec", "ModelSpec", "MoESpec",
    "Stack", "load_hardware", "load_model", "load_stack", "shipped_names",
]
