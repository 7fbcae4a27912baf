"""Validation against published measurements: ``llmpar validate`` (:mod:`llmpar.validate.core` evaluates,
:mod:`llmpar.validate.report` renders the tables and docs/validation.md); ``python -m llmpar.validate`` is an
alias of the command."""
