"""--ranks/--nodes that cannot describe the log's run are refused (reliability review, item 9:
`calibrate check good.txt --ranks 1000000` priced a million-rank all-reduce from a 4-rank log)."""

from tests.conftest import assert_one_line_error

NCCL = "tests/fixtures/nccl/"


def test_ranks_against_the_device_list_exit_2(cli):
    """current_allgather_4r2n.txt lists 4 ranks on 2 hosts."""
    res = cli("calibrate", "check", NCCL + "current_allgather_4r2n.txt", "--hardware", "h100-sxm", "--ranks", "1000000")
    assert_one_line_error(res, "--ranks 1000000", "device list of 4 ranks")


def test_nodes_against_the_device_list_must_fill_evenly(cli):
    """--nodes may re-split a listed run (NCCL_P2P_DISABLE: --nodes = ranks, docs/calibration.md),
    but 4 ranks on 3 nodes cannot be."""
    res = cli("calibrate", "check", NCCL + "current_allgather_4r2n.txt", "--hardware", "h100-sxm", "--nodes", "3")
    assert_one_line_error(res, "4 ranks on 3 nodes")
    ok = cli("calibrate", "check", NCCL + "current_allgather_4r2n.txt", "--hardware", "h100-sxm", "--nodes", "4")
    assert "4 ranks, 4 node(s)" in ok.out, ok.err


def test_more_ranks_a_node_than_the_profile_holds_exit_2(cli):
    """A log without a device list: 64 ranks on 1 node is 64 a node; an H100 SXM node holds 8."""
    res = cli("calibrate", "check", NCCL + "headerless_ncclinfo_allreduce.txt", "--hardware", "h100-sxm",
              "--ranks", "64", "--nodes", "1")
    assert_one_line_error(res, "64 a node", "holds 8")


def test_overrides_that_agree_are_taken(cli):
    """--ranks 4 --nodes 2 on the headerless log (4 ranks, 2 hosts in its NCCL INFO lines)."""
    res = cli("calibrate", "check", NCCL + "headerless_ncclinfo_allreduce.txt", "--hardware", "h100-sxm",
              "--ranks", "4", "--nodes", "2", "--tolerance", "1000%")
    assert res.code == 0, res.err            # the check ran (a tolerance no log misses)
    assert "4 ranks, 2" in res.out
