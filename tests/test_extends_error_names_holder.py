"""A bad value inherited through `extends:` is named in the file that holds it (reliability
re-check 2026-12-03: `st/ext_price.yaml` -> "field 'gpu_hour_price'", though the .inf was in the
base file it extends)."""

from tests.conftest import assert_one_line_error


def test_hardware_error_names_the_base_that_holds_it(cli, tmp_path):
    (tmp_path / "base.yaml").write_text("name: base-inf\nextends: h100-sxm\ngpu_hour_price: .inf\n")
    (tmp_path / "child.yaml").write_text("name: child\nextends: base.yaml\ngpus_per_node: 8\n")
    res = cli("step", "llama-3-8b", "--hardware", tmp_path / "child.yaml")
    assert_one_line_error(res, "base.yaml (extended by", "child.yaml)", "gpu_hour_price")


def test_the_childs_own_bad_value_names_the_child(cli, tmp_path):
    (tmp_path / "base.yaml").write_text("name: base-inf\nextends: h100-sxm\ngpu_hour_price: .inf\n")
    (tmp_path / "child.yaml").write_text("name: child\nextends: base.yaml\ngpu_hour_price: 3\ngpu: {sms: 0}\n")
    res = cli("step", "llama-3-8b", "--hardware", tmp_path / "child.yaml")
    assert_one_line_error(res, "child.yaml", "gpu.sms")
    assert "extended by" not in res.err


def test_model_error_names_the_base_that_holds_it(cli, tmp_path):
    (tmp_path / "mbase.yaml").write_text("name: mbase\nextends: llama-3-8b\nlayers: -3\n")
    (tmp_path / "mchild.yaml").write_text("name: mchild\nextends: mbase.yaml\nhidden: 4096\n")
    assert_one_line_error(cli("memory", tmp_path / "mchild.yaml"), "mbase.yaml (extended by", "layers")
