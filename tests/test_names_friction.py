"""Names a newcomer types (newcomer review, item 14): a Hugging Face hub id says llmpar does not
fetch from the hub, and nvidia-smi's "H100 80GB" finds the H100 SXM profile."""

from tests.conftest import assert_one_line_error


def test_hub_id_says_what_to_do(cli):
    assert_one_line_error(cli("memory", "meta-llama/Meta-Llama-3-70B"), "hugging face hub id", "--hf")


def test_h100_80gb_is_the_sxm_profile(cli):
    res = cli("memory", "llama-3-70b", "--hardware", "h100-80gb", "--json")
    assert res.code == 0, res.err
    assert res.json()["hardware"] == "h100-sxm"
