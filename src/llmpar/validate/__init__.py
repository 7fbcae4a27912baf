"""Validation of the time model against published measurements (``python -m llmpar.validate``)."""
