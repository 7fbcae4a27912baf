"""`llmpar validate --finetune`: the published LoRA/QLoRA runs of validation/finetune/ (docs/finetune.md).

The rows are evaluated with the same api.memory / api.step a user calls; the test checks the unit
conversions by hand, that each row's figure is the api's, and that a malformed source file is one
line naming the file and the run.
"""

from __future__ import annotations

import math

import pytest

import llmpar
from llmpar.errors import UserError
from llmpar.validation import finetune as VF
from tests.conftest import assert_one_line_error


@pytest.fixture(scope="module")
def block():
    return VF.validate_finetune()


def test_every_shipped_row_is_evaluated_out_of_sample(block):
    assert {s["name"] for s in block["sources"]} == {"answerai-fsdp-qlora", "litgpt-config-hub-a10g",
                                                      "torchtune-readme-llama31"}
    assert len(block["rows"]) == 16
    assert all(math.isfinite(r["error"]) for r in block["rows"])
    assert block["summary"]["scheme"].startswith("out of sample")
    assert block["summary"]["memory"]["rows"] == 14 and block["summary"]["speed"]["rows"] == 2


def test_a_row_is_the_api_figure_in_the_units_its_key_names(block):
    # Answer.AI, Llama-2 7B QLoRA, FSDP over 2 GPUs, 1 x 512: 4.98 GiB reserved = 4.98 x 2^30 bytes
    row = next(r for r in block["rows"] if r["row"].startswith("Llama-2 7B QLoRA, FSDP, 1 x 512"))
    assert row["published"] == pytest.approx(4.98 * 2**30)
    m = llmpar.memory("llama-2-7b", hardware="h100-sxm", gpus=2, dp=2, zero=3, micro_batch=1, seq=512,
                      global_batch=2, recompute="full", finetune="qlora", lora_rank=64, lora_targets="all",
                      stack="torchtitan")
    assert row["predicted"] == pytest.approx(m.memory["reserved_bytes"], rel=1e-12)
    assert row["error"] == pytest.approx(m.memory["reserved_bytes"] / (4.98 * 2**30) - 1, rel=1e-12)
    # torchtune's 405B row is printed in GB (1e9), LitGPT's in decimal GB too
    tt = next(r for r in block["rows"] if "405B" in r["row"])
    assert tt["published"] == pytest.approx(44.8e9)
    # speed: 1024 samples x 2048 tokens / 672 s / 8 GPUs = 390.1 tokens/s per GPU
    sp = next(r for r in block["rows"] if "8x A100" in r["row"])
    assert sp["published"] == pytest.approx(1024 * 2048 / 672 / 8, rel=1e-3)


def test_the_command_prints_the_tables_and_json(cli, tmp_path):
    res = cli("validate", "--finetune")
    assert res.code == 0, res.err
    assert "out of sample" in res.out and "answerai-fsdp-qlora" in res.out
    js = cli("validate", "--finetune", "--json").json()
    assert len(js["finetune"]["rows"]) == 16
    page = tmp_path / "ft.html"
    assert cli("validate", "--finetune", "--html", page).code == 0
    # two header rows, the 16 runs, the memory and speed summary rows
    assert page.read_text(encoding="utf-8").count("<tr>") == 2 + 16 + 2


@pytest.mark.parametrize("args, needle", [
    (("validate", "--finetune", "--source", "x"), "--source"),
    (("validate", "--finetune", "--serving"), "choose one"),
])
def test_options_that_change_nothing_are_refused(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


@pytest.mark.parametrize("run, needle", [
    ("{model: llama-2-7b}", "missing"),
    ("{model: llama-2-7b, hardware: h100-sxm, gpus: 1, zero: 0, finetune: lora, lora_rank: 8, lora_targets: qv, "
     "micro_batch: 1, seq: 512, recompute: none}", "exactly one measured figure"),
    ("{model: llama-2-7b, hardware: h100-sxm, gpus: 1, zero: 0, finetune: lora, lora_rank: 8, lora_targets: qv, "
     "micro_batch: 1, seq: 512, recompute: none, peak_allocated_gb: -3}", "positive number"),
    ("{model: llama-2-7b, hardware: h100-sxm, gpus: 1, zero: 0, finetune: lora, lora_rank: 8, lora_targets: qv, "
     "micro_batch: 1, seq: 512, recompute: none, peak_allocated_gb: 3, colour: red}", "unknown colour"),
])
def test_a_malformed_source_names_the_file_and_the_run(tmp_path, run, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(f"source: x\nruns:\n  - {run}\n", encoding="utf-8")
    with pytest.raises(UserError, match="bad.yaml run 1") as exc:
        VF.read_file(f)
    assert needle in str(exc.value)
