"""Validation against published measurements: ``llmpar validate`` (:mod:`llmpar.validation.core` evaluates,
:mod:`llmpar.validation.report` renders the tables and docs/validation.md); ``python -m llmpar.validation`` is an
alias of the command.

The function is ``llmpar.validate`` (:func:`llmpar.api.validate`); this package is
``llmpar.validation`` (no subpackage shares a name with an API function)."""
