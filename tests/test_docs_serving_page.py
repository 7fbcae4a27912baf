"""The commands of docs/serving.md, run as tests/test_docs_commands.py runs every page's (its own
file so that pytest-xdist can run it beside the others: docs/testing.md, Time budget)."""

from __future__ import annotations

import pytest
from test_docs_commands import cases, check_page_command


@pytest.mark.parametrize("page,index", cases("serving")[0], ids=cases("serving")[1])
def test_page_command(page, index):
    check_page_command(page, index)
