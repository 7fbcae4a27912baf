"""The --margin refusal shows the inequality that failed (newcomer review, item 11: "smallest
memory needed 85.1 GB ... > 85.9 GB" read as a false inequality; the x 1.05 was not shown)."""

import re

import pytest

from tests.conftest import assert_one_line_error


def test_margin_refusal_shows_total_times_margin(cli):
    res = cli("plan", "llama-3-70b", "--gpus", "16", "--margin", "5%")
    assert_one_line_error(res, "x 1.05 =", code=1)
    m = re.search(r"needed ([\d.]+) GB .*?\) x 1\.05 = ([\d.]+) GB > ([\d.]+) GB of HBM", res.err)
    total, product, hbm = (float(x) for x in m.groups())
    assert product == pytest.approx(total * 1.05, abs=0.1)     # both printed to 0.1 GB
    assert product > hbm                                       # the inequality printed is true


def test_no_margin_refusal_keeps_the_plain_inequality(cli):
    res = cli("plan", "llama-3-70b", "--gpus", "8", "--margin", "0")
    assert_one_line_error(res, "no layout fits", code=1)
    assert " x 1" not in res.err.split("HBM per GPU")[0].split("needed")[1]
