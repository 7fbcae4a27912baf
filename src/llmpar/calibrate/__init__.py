"""Calibration against the user's own cluster, by subject (docs/architecture.md, the rooms):

- **nccl-tests logs**: :mod:`~llmpar.calibrate.nccl_tests` reads nccl-tests / rccl-tests output
  (every published text layout: :mod:`~llmpar.calibrate.nccl_text`; ``-J`` JSON:
  :mod:`~llmpar.calibrate.nccl_json`) into :class:`ParsedLog` objects, with the rows' own evidence
  (:mod:`~llmpar.calibrate.nccl_from_rows`, :mod:`~llmpar.calibrate.nccl_infer`,
  :mod:`~llmpar.calibrate.nccl_records`), and writes the text layout
  (:mod:`~llmpar.calibrate.nccl_write`).
- **the collective model fitted and checked**: :mod:`~llmpar.calibrate.placement` (where a table
  sits on a profile), :mod:`~llmpar.calibrate.fit_params`, :mod:`~llmpar.calibrate.fit_search`,
  :mod:`~llmpar.calibrate.fit` (``calibrate fit``), :mod:`~llmpar.calibrate.check`.
- **live measurements**: :mod:`~llmpar.calibrate.bench` and :mod:`~llmpar.calibrate.bench_ops` time
  collectives with ``torch.distributed`` (under torchrun); :mod:`~llmpar.calibrate.gemm` measures
  matmuls and :mod:`~llmpar.calibrate.gemm_fit` fits the profile's GEMM efficiency curve.
- **a stack from measured training runs** (``calibrate runs``; ``validate`` predicts through the
  same rooms): reading (:mod:`~llmpar.calibrate.runs_io`, :mod:`~llmpar.calibrate.runs_record`,
  :mod:`~llmpar.calibrate.runs_row`, :mod:`~llmpar.calibrate.train_logs`,
  :mod:`~llmpar.calibrate.train_log_layout`), predicting (:mod:`~llmpar.calibrate.runs_layouts`,
  :mod:`~llmpar.calibrate.runs_predict`), fitting (:mod:`~llmpar.calibrate.runs_parameters`,
  :mod:`~llmpar.calibrate.runs`, :mod:`~llmpar.calibrate.runs_holdout`) and reporting
  (:mod:`~llmpar.calibrate.runs_report`).
- **an engine from serving benchmarks**: :mod:`~llmpar.calibrate.serve_logs`.

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
