"""Units, spec loading and layout resolution (docs/architecture.md: Units, CLI conventions)."""

import pytest

from llmpar.errors import UserError
from llmpar.layout import resolve
from llmpar.specs import load_hardware, load_model
from llmpar.units import parse_bandwidth, parse_bytes, parse_count, parse_flops, parse_per_direction_bandwidth, parse_seconds

from conftest import assert_one_line_error


def test_units():
    assert parse_bytes("1GiB") == 2**30
    assert parse_bytes("512MB") == 512e6
    assert parse_bytes("4096") == 4096
    assert parse_bytes("80 GiB") == 80 * 2**30
    # 400 Gb/s is bits: 400e9 / 8 = 50e9 bytes/s (one NDR NIC)
    assert parse_bandwidth("400 Gb/s") == (50e9, False)
    # NVLink 4 marketing figure is bidirectional: 900 / 2 = 450 GB/s per direction
    assert parse_per_direction_bandwidth("900 GB/s bidirectional") == 450e9
    assert parse_flops("989 TFLOPS") == 989e12
    assert parse_seconds("2 us") == 2e-6
    assert parse_count("7.5B") == 7.5e9


@pytest.mark.parametrize("bad", ["0", "-5", "abc", "1.5XB", ""])
def test_bad_sizes(bad):
    with pytest.raises(UserError):
        parse_bytes(bad)


def test_alias_and_hardware():
    assert load_model("llama-70b").name == "llama-3-70b"
    hw = load_hardware("h100-sxm")
    assert hw.gpu.memory == 80 * 2**30
    assert hw.scale_up.bandwidth == 450e9 and hw.scale_out.bandwidth == 50e9


def test_resolve_defaults_one_node():
    m, hw = load_model("llama-3-70b"), load_hardware("h100-sxm")
    r = resolve(m, hw, zero=3)
    # one DGX: 8 GPUs, all data-parallel
    assert (r.parallel.dp, r.parallel.gpus) == (8, 8)
    assert any("one node" in a for a in r.assumptions)
    r = resolve(m, hw, gpus=64, tp=8, pp=2, global_batch=64)
    # dp = 64 / (8*2) = 4; m = 64 / (1*4) = 16
    assert (r.parallel.dp, r.parallel.microbatches, r.parallel.sp) == (4, 16, True)


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(gpus=100, tp=8), "not divisible"),
        (dict(gpus=64, tp=8, dp=4), "disagrees"),
        (dict(tp=3), "heads"),
        (dict(tp=16), "kv heads"),
        (dict(pp=81), "layers"),
        (dict(gpus=16, global_batch=7), "global-batch"),
        (dict(tp=-1), "positive"),
    ],
)
def test_resolve_rejects(kw, needle):
    with pytest.raises(UserError, match="(?i)" + needle):
        resolve(load_model("llama-3-70b"), load_hardware("h100-sxm"), **kw)


def test_unknown_model_suggests(tmp_path):
    with pytest.raises(UserError, match="did you mean"):
        load_model("llama-3-7b")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nlayers: [1,\n")
    with pytest.raises(UserError, match=r"bad.yaml:\d+"):
        load_model(str(bad))
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("name: x\nlayers: -4\nhidden: 8\nheads: 1\nffn_hidden: 8\nvocab: 8\nmax_seq: 8\n")
    with pytest.raises(UserError, match="layers"):
        load_model(str(wrong))


def test_hardware_extends(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nextends: h100-sxm\ntiers:\n  - name: infiniband\n    bandwidth: 200 Gb/s\n")
    hw = load_hardware(str(f))
    assert hw.scale_out.bandwidth == 25e9          # 200 Gb/s / 8
    assert hw.scale_up.bandwidth == 450e9          # inherited
    assert hw.gpu.memory == 80 * 2**30


def test_cli_unknown_command_is_one_line(cli):
    res = cli("memory-x")
    assert_one_line_error(res, "no such command")


def test_shared_knobs_become_scalars_and_tp_stays_an_array():
    # Parallel.shared_as_scalars (the planner's candidates): a field whose entries all agree
    # becomes one Python number of its kind; a field that varies, and tp always, stays an array
    import numpy as np

    from llmpar.parallel import Parallel

    p = Parallel(tp=np.array([8, 8]), pp=np.array([4, 4]), dp=np.array([2, 4]), sp=np.array([True, True]),
                 seq=np.array([8192, 8192])).shared_as_scalars()
    assert isinstance(p.tp, np.ndarray) and p.tp.tolist() == [8, 8]
    assert p.pp == 4 and type(p.pp) is int and p.seq == 8192 and type(p.seq) is int
    assert p.sp is True
    assert isinstance(p.dp, np.ndarray) and p.dp.tolist() == [2, 4]
    assert p.gpus.tolist() == [8 * 4 * 2, 8 * 4 * 4]       # tp·cp·pp·dp broadcasts over the scalars
