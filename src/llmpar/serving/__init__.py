"""Serving on paper (docs/serving.md): one deployment (:mod:`llmpar.serving.run`; its options
checked in :mod:`llmpar.serving.deployment`), its evidence (:mod:`llmpar.serving.evidence`) and
the published serving runs it is validated on (:mod:`llmpar.serving.published`). The formulas live
in ``llmpar.cost.serving*``."""
