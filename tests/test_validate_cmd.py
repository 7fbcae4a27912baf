"""`llmpar validate`: published vs predicted for the shipped validation/*.yaml rows.

Hand-checkable rows (Korthikanti 2022 Table 5), group statistics recomputed by hand from the rows,
the filters, the exit codes and the generated page. Sources are limited with --source (and the
1,650-run playbook file only through --limit) to keep this file fast.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO

K = "korthikanti2022-table5"
N = "narayanan2021-table1"


@pytest.fixture(scope="module")
def korthikanti():
    from llmpar.validation.core import validate

    return validate(K)


def test_korthikanti_row_by_hand(cli):
    # Korthikanti et al. 2022 Table 5: 22B, full recompute baseline = 1.42 s per iteration on
    # 8 A100s with the Table 3 layout tp 8, pp 1, no data parallelism, B = b = 4, seq 2048
    res = cli("validate", "--source", K, "--json")
    assert res.code == 0, res.err
    data = res.json()
    assert set(data) >= {"rows", "groups"}
    row = next(r for r in data["rows"] if r["row"] == "Table 5, 22B, full recompute")
    assert set(row) >= {"source", "row", "metric", "published", "predicted", "error", "convention", "stack", "config"}
    assert row["source"] == K and row["metric"] == "step_time_s" and row["stack"] == "megatron-2022"
    assert row["published"] == 1.42
    # a time: error = predicted time / published time - 1 (positive = llmpar slower)
    assert row["error"] == pytest.approx(row["predicted"] / 1.42 - 1, rel=1e-12)
    assert 0.5 < row["predicted"] < 3.0
    c = row["config"]
    assert (c["model"], c["hardware"], c["gpus"], c["tp"], c["pp"], c["dp"], c["cp"]) == \
        ("megatron-gpt-22b", "a100-80gb", 8, 8, 1, 1, 1)
    assert (c["micro_batch"], c["global_batch"], c["seq"], c["recompute"], c["sp"], c["dtype"]) == \
        (4, 4, 2048, "full", False, "fp16")
    assert set(c) >= {"model", "hardware", "gpus", "tp", "pp", "dp", "cp", "ep", "zero", "recompute", "micro_batch",
                      "global_batch", "seq", "virtual_stages", "dtype"}
    assert row["searched"] == []          # Table 3 publishes every knob; megatron-2022 has ZeRO 0 only
    assert "iteration" in row["convention"]


def test_korthikanti_interleaved_row_echoes_the_layout(korthikanti):
    # 175B: tp 8, pp 8, B = 64, b = 1, interleaved with 3 chunks per stage (Table 3)
    row = next(r for r in korthikanti.rows if r["row"] == "Table 5, 175B, present work")
    c = row["config"]
    assert (c["tp"], c["pp"], c["dp"], c["micro_batch"], c["microbatches"], c["virtual_stages"], c["schedule"]) == \
        (8, 8, 1, 1, 64, 3, "interleaved")
    assert (c["recompute"], c["sp"]) == ("selective", True)
    assert row["published"] == 13.75


def test_the_row_matches_llmpar_step(korthikanti):
    # the same model a user runs: `llmpar step` on the row's layout and stack gives the same time
    from llmpar.cost.step import step_time
    from llmpar.parallel import Parallel, Settings
    from llmpar.specs import load_hardware, load_model

    row = next(r for r in korthikanti.rows if r["row"] == "Table 5, 22B, present work")
    par = Parallel(tp=8, pp=1, dp=1, sp=True, recompute=1, micro_batch=4, microbatches=1, seq=2048)
    t = step_time(load_model("megatron-gpt-22b"), load_hardware("a100-80gb"), par,
                  Settings(dtype="fp16", stack="megatron-2022"))["step_time_s"]
    assert row["predicted"] == pytest.approx(float(t), rel=1e-12)


def test_group_statistics_by_hand(korthikanti):
    (g,) = korthikanti.groups
    assert (g["source"], g["metric"], g["stack"], g["rows"]) == (K, "step_time_s", "megatron-2022", 8)
    errs = np.abs([r["error"] for r in korthikanti.rows])
    assert g["mean_abs_error"] == pytest.approx(errs.sum() / 8)
    assert g["max_abs_error"] == pytest.approx(errs.max())
    assert g["median_abs_error"] == pytest.approx(np.sort(errs)[3:5].mean())   # 8 rows: mean of the middle two


def test_throughput_error_direction_and_hfu_convention(cli):
    # Narayanan 2021 Table 1 publishes TFLOP/s per GPU with eq. 3 (recompute counted): error =
    # predicted / published throughput - 1, and the convention says HFU
    data = cli("validate", "--source", N, "--json").json()
    row = data["rows"][0]
    assert row["metric"] == "tflops_per_gpu" and row["published"] == 137
    assert row["error"] == pytest.approx(row["predicted"] / 137 - 1, rel=1e-12)
    assert "HFU" in row["convention"] and "eq. 3" in row["convention"]
    # the paper prints no micro-batch; the script that ran the row does (examples/sc21/run_table_1.sh)
    assert row["searched"] == [] and row["config"]["micro_batch"] == 16
    assert {r["source"] for r in data["rows"]} == {N}


def test_source_filter_and_stack_override(cli):
    a = cli("validate", "--source", K, "--source", N, "--json").json()
    assert [g["source"] for g in a["groups"]] == [K, N]
    b = cli("validate", "--source", K, "--stack", "megatron-core", "--json").json()
    assert {r["stack"] for r in b["rows"]} == {"megatron-core"} and b["groups"][0]["stack"] == "megatron-core"


def test_stack_file_override(cli, tmp_path):
    # --stack takes a FILE as every command does (it used to be looked up again by its name):
    # a stack that extends megatron-2022 with twice the fixed cost per step (Korthikanti's 22B
    # rows have one micro-batch, so the step grows by exactly 2 s over the shipped stack's)
    f = tmp_path / "slow.yaml"
    f.write_text("name: my-slow-2022\nextends: megatron-2022\ndescription: test\nfixed: {per_step_s: 2 s}\n")
    a = cli("validate", "--source", K, "--json").json()["rows"][0]
    res = cli("validate", "--source", K, "--stack", str(f), "--json")
    assert res.code == 0, res.err
    b = res.json()["rows"][0]
    assert b["stack"] == "my-slow-2022" and b["predicted"] == pytest.approx(a["predicted"] + 2.0)


def test_memory_and_fits_rows_on_a_playbook_slice(cli):
    # the first 5 playbook runs (nanotron, 1 node): tokens/s, peak reserved memory (GiB x 2**30
    # as the file records it) against llmpar's allocator pool, and the FITS verdict
    data = cli("validate", "--source", "playbook-nanotron-h100", "--limit", "5", "--json").json()
    metrics = [g["metric"] for g in data["groups"]]
    assert metrics == ["tokens_per_s_per_gpu", "peak_reserved_bytes", "fits"]
    mem = next(r for r in data["rows"] if r["metric"] == "peak_reserved_bytes")
    # run 1 records gpu_memory_gb: 50.2 (GiB, as the playbook's torch.cuda figures are):
    # round(50.2 x 2^30) = 53,901,839,565 bytes
    assert mem["published"] == 53901839565 and "reserved" in mem["convention"]
    assert mem["error"] == pytest.approx(mem["predicted"] / mem["published"] - 1)
    fits = next(g for g in data["groups"] if g["metric"] == "fits")
    assert fits["rows"] == 5 and fits["agreement"] == pytest.approx(
        np.mean([r["predicted"] == "fits" for r in data["rows"] if r["metric"] == "fits"]))


def test_tolerance_exit_codes(cli, korthikanti):
    worst = korthikanti.groups[0]["mean_abs_error"]
    ok = cli("validate", "--source", K, "--tolerance", f"{(worst + 0.01) * 100:.1f}%")
    assert ok.code == 0, ok.err
    bad = cli("validate", "--source", K, "--tolerance", f"{max(worst - 0.01, 0.001) * 100:.1f}%")
    assert bad.code == 1
    assert len(bad.err.strip().splitlines()) == 1 and K in bad.err and "step_time_s" in bad.err
    assert cli("validate", "--source", K, "--tolerance", "0.5").code == 0       # a fraction works too


@pytest.mark.parametrize("args, word", [
    (("--source", "nope"), "unknown validation source"),
    (("--source", K, "--stack", "nope"), "unknown stack"),
    (("--tolerance", "ten"), "--tolerance"),
    (("--out", "x.md"), "--out goes with --markdown"),
])
def test_bad_input_is_one_line_exit_2(cli, args, word):
    res = cli("validate", *args)
    assert res.code == 2 and word in res.err and len(res.err.strip().splitlines()) == 1


def test_markdown_one_section_per_source(cli, tmp_path):
    out = tmp_path / "validation.md"
    res = cli("validate", "--source", K, "--source", N, "--markdown", "--out", str(out))
    assert res.code == 0, res.err
    page = out.read_text()
    sections = [ln for ln in page.splitlines() if ln.startswith("## ")]
    # the fixed text's one section (how the honest figures are made), then the leave-one-source-out
    # figures lead (issue 23), the in-sample summary follows, labelled
    assert sections[0].startswith("## Leave-one-source-out and intervals: how")
    assert sections[1] == "## Leave-one-source-out (the honest figures)"
    assert sections[2].startswith("## Summary (as shipped: in-sample")
    assert len(sections) == 5 and sections[3].startswith("## Korthikanti") and sections[4].startswith("## Narayanan")
    assert "| Table 5, 22B, full recompute |" in page and "1.42 s" in page
    assert "fitted on" in page and "megatron-2022" in page            # what the stack was fitted on
    assert "llmpar validate --markdown --out docs/validation.md" in page
    stdout = cli("validate", "--source", K, "--markdown")
    assert stdout.out.startswith("# Validation against published measurements")


def test_shipped_page_is_the_generated_one():
    # docs/validation.md is `llmpar validate --markdown` output, not hand-written: its fixed text
    # and one section per shipped source
    from llmpar.validation.sources import source_names
    from llmpar.validation.report import PREAMBLE

    page = (REPO / "docs" / "validation.md").read_text()
    assert page.startswith(PREAMBLE.rstrip())
    for name in source_names():
        assert f"`llmpar validate --source {name}`" in page


def test_data_dir_resolves_the_shipped_files():
    from llmpar.specs.registry import data_dir
    from llmpar.validation.sources import source_names

    d = data_dir("validation")
    assert (d / f"{K}.yaml").is_file()
    assert len(source_names()) == len(list((REPO / "validation").glob("*.yaml")))


def test_installed_layout_without_the_repository(tmp_path):
    # an installed wheel: llmpar/ with data/{hardware,models,stacks,validation} and no repository
    # folders around it; data_dir falls through to importlib.resources
    site = tmp_path / "site"
    shutil.copytree(REPO / "src" / "llmpar", site / "llmpar", ignore=shutil.ignore_patterns("__pycache__"))
    for kind in ("hardware", "models", "stacks", "validation"):
        shutil.copytree(REPO / kind, site / "llmpar" / "data" / kind)
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = ("from llmpar.specs.registry import data_dir; print(data_dir('validation'));"
            "from llmpar.validation.core import validate; r = validate('korthikanti2022-table5');"
            "print(r.rows[0]['published'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    where, published = out.stdout.split()
    assert Path(where) == site / "llmpar" / "data" / "validation" and float(published) == 1.42


def test_module_alias(cli):
    # `python -m llmpar.validation ARGS` is `llmpar validate ARGS`
    out = subprocess.run([sys.executable, "-m", "llmpar.validation", "--source", K, "--json"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert out.returncode == 0, out.stderr
    import json

    assert json.loads(out.stdout)["groups"][0]["source"] == K


def test_summary_says_whether_each_error_is_in_sample():
    """The summary's "in-sample?" column, from each stack's own record (stacks/*.yaml):
    megatron-2022's calibration.files list Korthikanti Table 5 and its 18 fit runs cover the
    8 rows -> in-sample; nanotron's in-sample error counts 171 runs (1-2 nodes) of the playbook's
    1,127 -> partly; torchtitan-compile fits no memory.* value -> its memory rows are out of
    sample; megatron-core names NeMo 25.11 B200 only in its fitted_on prose (the Blackwell GEMM
    fit, dense rows only) -> wholly or in part."""
    from llmpar.validation.core import validate
    from llmpar.validation.report import summary_rows

    res = validate(["korthikanti2022-table5", "playbook-nanotron-h100", "torchtitan-compile-h100-2024",
                    "nemo-2511-b200"], cross_validate=False)    # the summary column alone
    kind = {(r[0], r[1]): r[4] for r in summary_rows(res)}
    assert kind[("korthikanti2022-table5", "iteration time")] == "in-sample"
    assert kind[("playbook-nanotron-h100", "tokens/s per GPU")] == "partly in-sample (171 fit runs)"
    assert kind[("playbook-nanotron-h100", "FITS/OOM verdict")] == "partly in-sample (171 fit runs)"
    assert kind[("torchtitan-compile-h100-2024", "tokens/s per GPU")] == "in-sample"
    assert kind[("torchtitan-compile-h100-2024", "peak reserved memory")] == "out of sample (memory not fitted)"
    assert kind[("nemo-2511-b200", "tokens/s per GPU")] == "in-sample, wholly or in part (see fitted_on)"


def test_a_run_that_ran_but_does_not_fit_is_marked(cli):
    # Narayanan 2021 §5.2: the 530B model under ZeRO-3 ran on 640 A100s (and not on 560). The row
    # states its layout, nothing is searched, and llmpar's memory model puts it above the A100's
    # 80 GB (docs/stacks.md, Known limits), yet the run completed: the row says so with "!", and
    # its speed is still the published layout's. Its neighbours at 1120 and 2240 GPUs fit.
    data = cli("validate", "--source", "narayanan2021-table2-zero3", "--json").json()
    rows = {r["row"]: r for r in data["rows"]}
    row = rows["Table 2, ZeRO-3 529.6B, 640 GPUs"]
    assert row["status"] == "ok" and row["fits"] is False and row["searched"] == []
    from llmpar.validation import report

    assert report.row_cells(row)[1].endswith(" !") and report.ran_but_no_fit(row)
    wider = rows["Table 2, ZeRO-3 529.6B, 1120 GPUs"]
    assert wider["fits"] is True and not report.ran_but_no_fit(wider)
    assert report.no_fit_line(list(rows.values())) == (
        "! 1 published run(s) completed with a layout llmpar predicts does not fit (so llmpar's memory is "
        "pessimistic for it; its speed is predicted all the same): Table 2, ZeRO-3 529.6B, 640 GPUs")
    # a run that did not complete (an OOM run predicted not to fit agrees) carries no mark
    assert not report.ran_but_no_fit({**row, "status": "oom"})
    out = cli("validate", "--source", "narayanan2021-table2-zero3")
    assert out.code == 0 and "! = the run completed, llmpar predicts it does not fit" in " ".join(out.out.split())


def test_deepseek_v3_row_fits_with_its_stated_recompute(cli):
    # DeepSeek-V3 §3.2.3 and §3.3.3 publish the recompute (RMSNorm, MLA up-projections, the MoE
    # SwiGLU's output: selective), so the row states it and nothing about it is searched; with
    # hai-llm's routing weights applied in the activation (inferred from the run having fit:
    # stacks/hai-llm.yaml) the layout fits the H800's 80 GB and the row carries no "!".
    data = cli("validate", "--source", "deepseek-v3-h800", "--json").json()
    (row,) = data["rows"]
    assert row["status"] == "ok" and row["fits"] is True
    assert row["config"]["recompute"] == "selective" and "recompute" not in row["searched"]
    from llmpar.validation import report

    assert not report.row_cells(row)[1].endswith("!") and report.no_fit_line([row]) is None


def test_a_large_source_counts_its_runs_that_ran_but_do_not_fit():
    # a source shown per model and GPU count (more than report.BIG_SOURCE runs) cannot mark rows with
    # "!": it says how many of its completed runs llmpar predicts do not fit, out of those that
    # completed (OOM rows are neither): here 2 of 3
    from llmpar.validation import report

    rows = [{"row": "a", "status": "ok", "fits": False}, {"row": "b", "status": "ok", "fits": True},
            {"row": "c", "status": "ok", "fits": False}, {"row": "d", "status": "oom", "fits": False}]
    assert report.no_fit_count_line(rows).startswith(
        "! 2 of the 3 published runs that completed have a layout llmpar predicts does not fit")
    assert report.no_fit_count_line([{**r, "fits": True} for r in rows[:3]]) is None


def test_a_validation_is_kept_while_the_shipped_files_are_unchanged(monkeypatch):
    # validation/core.py keeps the last validation of the shipped stacks for the process, keyed by
    # the sources asked for, the options and specs.reading.shipped_files_state(); each caller gets
    # its own copy, and a changed file state (an edited spec) evaluates again
    from llmpar.validation import core

    calls = []
    evaluate = core.evaluate_source
    monkeypatch.setattr(core, "evaluate_source", lambda *a, **k: calls.append(a[0]) or evaluate(*a, **k))
    monkeypatch.setattr(core, "_MEMO", {})
    first = core.validate(K, limit=2)
    n = len(calls)
    assert n >= 1
    first.rows[0]["predicted"] = -1.0
    again = core.validate(K, limit=2)
    assert len(calls) == n and again.rows[0]["predicted"] > 0          # no evaluation; an untouched copy
    assert core.validate(K, limit=3) is not None and len(calls) > n     # other options: evaluated
    n = len(calls)
    import llmpar.specs.reading as reading

    state = reading.shipped_files_state
    monkeypatch.setattr(reading, "shipped_files_state", lambda *a: state(*a) + (("edited.yaml", 1, 1),))
    core.validate(K, limit=3)
    assert len(calls) > n                                                  # an edited file: evaluated again
