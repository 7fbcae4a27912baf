"""A per-profile price for a profile the command does not run is refused, not ignored (newcomer
review: sweep --hardware h100-sxm --gpu-hour-price h100-sxm=2,b200=4 dropped b200's price)."""

import pytest

from tests.conftest import assert_one_line_error


@pytest.mark.parametrize("cmd", [
    ("sweep", "llama-3-8b", "--gpus", "8,16"),
    ("plan", "llama-3-8b", "--gpus", "8"),
    ("step", "llama-3-8b", "--gpus", "8"),
])
def test_price_for_a_profile_not_run_exits_2(cli, cmd):
    res = cli(*cmd, "--tokens", "1T", "--gpu-hour-price", "h100-sxm=2,b200=4")
    assert_one_line_error(res, "b200", "does not run")


def test_price_map_by_alias_is_used(cli):
    """h100 is an alias of h100-sxm: 30.4k GPU-hours x 4 = ~121k (cost = GPU-hours x price)."""
    res = cli("step", "llama-3-8b", "--gpus", "8", "--tokens", "1T", "--gpu-hour-price", "h100=4", "--json")
    assert res.code == 0, res.err
    t = res.json()["training"]
    assert t["cost"] == pytest.approx(t["gpu_hours"] * 4.0, rel=1e-9)
