"""`memory --params` refuses the options that change nothing for a bare count (reliability review,
item 15: --sp, --global-batch and --microbatches were accepted and the total did not move)."""

from tests.conftest import assert_one_line_error


def test_params_refuses_sp(cli):
    assert_one_line_error(cli("memory", "--params", "7.5B", "--tp", "2", "--dp", "4", "--sp"), "--sp", "--params")


def test_params_refuses_a_batch_split_that_changes_nothing(cli):
    """megatron-core keeps bf16 gradients whatever m is: the batch split has no effect."""
    for flag, value in (("--global-batch", "64"), ("--microbatches", "4")):
        res = cli("memory", "--params", "7.5B", "--dp", "8", "--zero", "1", flag, value)
        assert_one_line_error(res, flag, "changes nothing")


def test_params_takes_a_batch_split_where_it_matters(cli):
    """torchtitan (FSDP2 under PP) accumulates unsharded fp32 gradients over m > 1 micro-batches:
    7.5B over pp 2 = 3.75B per GPU; at m = 1 (global batch 4 over dp 4) gradients are bf16,
    3.75e9 x 2 B = 7.5e9 B; at m = 16 (global batch 64) fp32, 3.75e9 x 4 B = 15e9 B."""
    def grads(gb):
        res = cli("memory", "--params", "7.5B", "--dp", "4", "--pp", "2", "--zero", "1", "--stack", "torchtitan",
                  "--global-batch", gb, "--json")
        assert res.code == 0, res.err
        return res.json()["memory"]["gradients_bytes"]

    assert grads("4") == 7.5e9
    assert grads("64") == 15e9
