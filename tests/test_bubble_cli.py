"""`llmpar bubble`: the drawing, the labelled ratios, --json, and bad input (one line, exit 2)."""

from __future__ import annotations

import pytest

from conftest import assert_one_line_error


def test_json_interleaved(cli):
    res = cli("bubble", "--pp", "4", "--microbatches", "8", "--schedule", "interleaved",
              "--virtual-stages", "2", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert {k: d[k] for k in ("schedule", "pp", "microbatches", "virtual_stages")} == {
        "schedule": "interleaved", "pp": 4, "microbatches": 8, "virtual_stages": 2}
    # Narayanan 2021 §2.2.2: over ideal (p−1)/(v·m) = 3/16; of the step (p−1)/(v·m+p−1) = 3/19.
    assert d["bubble_over_ideal"] == pytest.approx(3 / 16)
    assert d["bubble_fraction_of_step"] == pytest.approx(3 / 19)
    # the drawn schedule idles exactly that fraction of stage-time
    assert d["drawn_idle_fraction"] == pytest.approx(3 / 19)


def test_json_1f1b_default_schedule(cli):
    d = cli("bubble", "--pp", "8", "--microbatches", "32", "--json").json()
    # default schedule 1f1b (docs/architecture.md); (p−1)/m = 7/32, (p−1)/(m+p−1) = 7/39
    assert d["schedule"] == "1f1b" and d["virtual_stages"] == 1
    assert d["bubble_over_ideal"] == pytest.approx(7 / 32)
    assert d["bubble_fraction_of_step"] == pytest.approx(7 / 39)
    assert d["in_flight_microbatches"] == 8


def test_virtual_stages_imply_interleaved(cli):
    d = cli("bubble", "--pp", "2", "--microbatches", "4", "--virtual-stages", "3", "--json").json()
    # (2−1)/(3·4) = 1/12
    assert d["schedule"] == "interleaved" and d["bubble_over_ideal"] == pytest.approx(1 / 12)


def test_interleaved_without_v_assumes_two(cli):
    res = cli("bubble", "--pp", "4", "--microbatches", "8", "--schedule", "interleaved")
    assert res.code == 0
    assert "assumed" in res.out and "v=2" in res.out
    assert "0.1875" in res.out  # 3/16


def test_drawing_1f1b(cli):
    res = cli("bubble", "--pp", "4", "--microbatches", "8", "--schedule", "1f1b")
    assert res.code == 0, res.err
    rows = [ln for ln in res.out.splitlines() if ln.startswith("stage ")]
    assert len(rows) == 4
    # stage 0: four forwards, then idle until B0 returns at t = 10 (units of 3 chars: 6 idle units)
    assert rows[0].startswith("stage 0 |F0 F1 F2 F3 " + "." * 18 + "B0")
    # stage 3 starts 3 units late and finishes 6 units early (idle shown as '.')
    assert rows[3].startswith("stage 3 |" + "." * 9 + "F0 B0")
    assert rows[3].rstrip("|").endswith("." * 18)
    # labelled ratios: 3/8 over ideal, 3/11 of the step
    assert "bubble over ideal time      0.3750" in res.out
    assert "bubble as fraction of step  0.2727" in res.out


def test_drawing_interleaved_shows_chunks(cli):
    res = cli("bubble", "--pp", "2", "--microbatches", "2", "--virtual-stages", "2")
    assert res.code == 0, res.err
    assert "F0:1" in res.out and "B1:0" in res.out


def test_zb_h1_and_dualpipe(cli):
    res = cli("bubble", "--pp", "4", "--microbatches", "8", "--schedule", "zb-h1")
    assert res.code == 0 and "W0" in res.out
    # F = B = W: (p−1)/(3m) = 3/24
    assert "0.1250" in res.out
    res = cli("bubble", "--pp", "8", "--microbatches", "16", "--schedule", "dualpipe", "--json")
    # (p−2)/(3m) = 6/48 = 0.125 with F = B = W and F&B = F + B_full; the drawn schedule (the
    # DualPipe repository's order) idles (p−2)/(3m+p−2) = 6/54 of device-time, the same bubble
    d = res.json()
    assert d["bubble_over_ideal"] == pytest.approx(0.125)
    assert d["drawn_idle_fraction"] == pytest.approx(6 / 54) and d["parameter_copies"] == 2
    res = cli("bubble", "--pp", "4", "--microbatches", "8", "--schedule", "dualpipe")
    assert res.code == 0 and "device 0 |F0 F1 F2 F4 B4 W4 F5" in res.out
    assert "drawn: 26 time units" in res.out     # 3m + p − 2 = 24 + 2


def test_layers_show_uneven_stages(cli):
    d = cli("bubble", "--pp", "16", "--microbatches", "16", "--layers", "126", "--json").json()
    # Llama-3.1-405B: 126 layers on 16 stages -> 8 on the busiest, 7 on the first and last
    assert d["stages"] == {"layers": 126, "most_loaded_stage_layers": 8,
                           "first_stage_layers": 7, "last_stage_layers": 7}


@pytest.mark.parametrize("args,needle", [
    (["--pp", "4", "--microbatches", "8", "--schedule", "foo"], "schedule"),
    (["--pp", "0", "--microbatches", "8"], "--pp"),
    (["--pp", "-2", "--microbatches", "8"], "--pp"),
    (["--pp", "4", "--microbatches", "0"], "--microbatches"),
    (["--pp", "4", "--microbatches", "8", "--virtual-stages", "2", "--schedule", "1f1b"], "interleaved"),
    (["--pp", "4", "--microbatches", "8", "--virtual-stages", "0"], "--virtual-stages"),
    (["--pp", "4", "--microbatches", "6", "--schedule", "interleaved"], "multiple of --pp"),
    (["--pp", "1", "--microbatches", "4", "--virtual-stages", "2"], "--pp"),
    (["--pp", "3", "--microbatches", "12", "--schedule", "dualpipe"], "even --pp"),
    (["--pp", "4", "--microbatches", "6", "--schedule", "dualpipe"], "2*pp"),
    (["--pp", "4", "--microbatches", "8", "--virtual-stages", "4", "--layers", "8"], "layers per pipeline stage"),
    (["--pp", "8", "--microbatches", "8", "--layers", "4"], "exceeds"),
    (["--pp", "four", "--microbatches", "8"], "--pp"),
    (["--microbatches", "8"], "--pp"),
])
def test_bad_input(cli, args, needle):
    assert_one_line_error(cli("bubble", *args), needle)
