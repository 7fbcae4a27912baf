"""docs/validation.md is `llmpar validate --markdown` (its own file so that pytest-xdist runs it beside
the other pages: docs/testing.md, Time budget)."""

from __future__ import annotations

from test_docs_commands import check_validation_page_is_generated


def test_validation_page_is_generated():
    check_validation_page_is_generated()
