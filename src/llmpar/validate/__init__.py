"""Validation against published measurements: ``llmpar validate`` (:mod:`llmpar.validate.core` evaluates,
:mod:`llmpar.validate.report` renders the tables and docs/validation.md); ``python -m llmpar.validate`` is an
alias of the command.

``llmpar.validate`` is the *function* (:func:`llmpar.api.validate`), not this package: import the
modules with ``from llmpar.validate import core`` or ``from llmpar.validate.core import validate``.
This file stays import-free: ``import llmpar`` loads it (see ``llmpar/__init__.py``)."""
