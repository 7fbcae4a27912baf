"""A sweep's size is bounded (issue 24, 'output sizes capped'; newcomer review: 1,000 GPU counts
ran 38 s with no bound): at most MAX_COUNTS counts and MAX_CELLS plans, one line, exit 2."""

import pytest

import llmpar
from llmpar.errors import UserError
from llmpar.planner.sweep import MAX_CELLS, MAX_COUNTS, parse_gpu_list
from tests.conftest import assert_one_line_error


def test_sweep_refuses_more_counts_than_the_cap(cli):
    counts = ",".join(str(8 * i) for i in range(1, MAX_COUNTS + 2))   # 65 counts
    assert_one_line_error(cli("sweep", "llama-3-8b", "--gpus", counts), "65 GPU counts", f"at most {MAX_COUNTS}")


def test_sweep_cap_counts_an_ellipsis_after_expanding():
    """1,2,...,2^20 is 21 counts (2^0 .. 2^20): inside the cap."""
    assert len(parse_gpu_list("1,2,...,1048576")) == 21
    assert len(parse_gpu_list(list(range(1, MAX_COUNTS + 1)))) == MAX_COUNTS
    with pytest.raises(UserError, match="at most"):
        parse_gpu_list(list(range(1, MAX_COUNTS + 2)))


def test_sweep_refuses_more_plans_than_the_cap():
    """64 counts x 5 profiles = 320 plans > 256."""
    assert MAX_COUNTS * 5 > MAX_CELLS
    with pytest.raises(UserError, match="320 plans"):
        llmpar.sweep("llama-3-8b", gpus=list(range(8, 8 * (MAX_COUNTS + 1), 8)),
                     hardware="h100-sxm,a100-80gb,b200,h200,mi300x")
