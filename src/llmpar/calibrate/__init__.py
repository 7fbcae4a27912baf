"""Calibration against the user's own cluster.

- :mod:`llmpar.calibrate.nccl_tests` reads nccl-tests / rccl-tests output (text in every layout
  that has been published, and the JSON written by ``-J``) into :class:`ParsedLog` objects, and
  writes the nccl-tests text layout (used by the torch benchmark, so ``parse`` reads it unchanged).
- :mod:`llmpar.calibrate.bench` times collectives with ``torch.distributed`` (run under torchrun).
- :mod:`llmpar.calibrate.gemm` measures matmul throughput and fits the profile's GEMM efficiency.

torch is imported lazily inside functions only (``llmpar --help`` must not import it).
Nothing here prints, except the ``python -m llmpar.calibrate.bench`` entry point on rank 0.
"""

from llmpar.calibrate.nccl_tests import (
    COLLECTIVES,
    Measurement,
    ParsedLog,
    Row,
    busbw_factor,
    normalize_collective,
    parse_file,
    parse_files,
    parse_text,
)

__all__ = [
    "COLLECTIVES",
    "Measurement",
    "ParsedLog",
    "Row",
    "busbw_factor",
    "normalize_collective",
    "parse_file",
    "parse_files",
    "parse_text",
]
