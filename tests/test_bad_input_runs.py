"""Bad input to `llmpar calibrate runs` (runs tables, training logs, options) found by an
adversarial sweep: each case ends as one line on stderr naming the file:line or the option, exit 2,
or as a note where the input is kept; and the `extends:` paths of user spec files."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import assert_one_line_error
from llmpar.calibrate.runs_io import read_runs

HEAD = "model,hardware,gpus,tp,pp,ep,seq,global_batch,micro_batch,step_time_s\n"


def _csv(tmp_path, name, body, head=HEAD):
    f = tmp_path / name
    f.write_text(head + body)
    return f


# ----------------------------------------------------------------------------- 1. layout rules

@pytest.mark.parametrize("row, needle", [
    # llama-3-8b (models/llama-3-8b.yaml): dense, 32 layers, 32 heads, 8 KV heads. `llmpar step`
    # refuses each of these layouts (layout.check_layout); a runs row that ran now gets the same words
    ("llama-3-8b,h100-sxm,8,1,1,2,8192,64,1,5.0", "ep=2 given but llama-3-8b has no experts"),
    ("llama-3-8b,h100-sxm,64,1,64,1,8192,64,1,5.0", "pp=64 exceeds the 32 layers"),
    ("llama-3-8b,h100-sxm,16,16,1,1,8192,64,1,5.0", "tp=16 does not divide the 8 KV heads"),
])
def test_a_run_that_ran_with_a_layout_step_refuses_is_refused(cli, tmp_path, row, needle):
    f = _csv(tmp_path, "runs.csv", row + "\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), f"{f}:2:", needle)
    # the same words as `llmpar step` (one rule in one place)
    lay = dict(zip(HEAD.strip().split(","), row.split(",")))
    step = cli("step", "llama-3-8b", "--hardware", "h100-sxm", "--gpus", lay["gpus"], "--tp", lay["tp"],
               "--pp", lay["pp"], "--ep", lay["ep"])
    assert_one_line_error(step, needle)


def test_a_run_that_did_not_run_with_a_broken_layout_is_kept_with_a_note(cli, tmp_path):
    # status oom: the layout rule agrees that it cannot run (the playbook's crashed pp > layers
    # runs); it is kept, predicted not to run, and the note says why
    f = _csv(tmp_path, "runs.csv", "llama-3-8b,h100-sxm,64,1,64,1,8192,64,1,oom\n",
             head=HEAD.replace("step_time_s", "status"))
    res = cli("calibrate", "runs", f, "--check", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert any(n.startswith(f"{f}:2: pp=64 exceeds the 32 layers") and "status (oom)" in n for n in d["notes"])
    assert d["rows"][0]["predicted_fits_after"] is False


def test_a_published_row_with_a_broken_layout_is_kept_as_published(cli, tmp_path):
    # validation/playbook-nanotron-h100.yaml row "run 1323": nanotron ran the 28-layer 3B at pp 32
    # (it places the embedding and head as pipeline blocks too); a row citing its source (`row:`)
    # is a record and stays as published, with the rule's words in a note
    y = tmp_path / "pub.yaml"
    y.write_text("hardware: h100-sxm\nruns:\n  - {row: run 7, model: llama-3-8b, gpus: 64, pp: 64, seq: 8192, "
                 "global_batch: 64, micro_batch: 1, step_time_s: 5}\n")
    res = cli("calibrate", "runs", y, "--check", "--json")
    assert res.code == 0, res.err
    assert any(n.startswith(f"{y}:3: pp=64 exceeds the 32 layers") and "row run 7" in n for n in res.json()["notes"])


# ----------------------------------------------------------------------------- 2. duplicate keys

def test_duplicate_keys_are_refused(cli, tmp_path):
    y = tmp_path / "runs.yaml"
    y.write_text("hardware: h100-sxm\nruns:\n"
                 "  - {model: llama-3-8b, gpus: 8, gpus: 16, seq: 8192, global_batch: 64, step_time_s: 5}\n")
    assert_one_line_error(cli("calibrate", "runs", y, "--check"), f"{y}:3:", "duplicate key 'gpus'")
    j = tmp_path / "runs.jsonl"
    j.write_text('{"model": "llama-3-8b", "hardware": "h100-sxm", "seq": 8192, "global_batch": 64, '
                 '"step_time_s": 5, "gpus": 8}\n'
                 '{"model": "llama-3-8b", "hardware": "h100-sxm", "gpus": 8, "gpus": 16, "seq": 8192}\n')
    assert_one_line_error(cli("calibrate", "runs", j, "--check"), f"{j}:2:", "duplicate key 'gpus'")
    c = _csv(tmp_path, "runs.csv", "llama-3-8b,h100-sxm,8,1,1,1,8192,64,1,5.0\n")
    assert_one_line_error(cli("calibrate", "runs", c, "--check", "--layout", "gpus=16,gpus=32"),
                          "--layout gives gpus twice")
    assert_one_line_error(cli("calibrate", "runs", c, "--check", "--model", "llama-3-8b", "--layout", "model=x"),
                          "--layout model=x and --model llama-3-8b")


# ----------------------------------------------------------------------------- 3. training logs

def _megatron_log(path, *, it_gbs=512, tflops="400.0", elapsed="10000.0", max_reserved="70000.0", extra_args=""):
    """A minimal Megatron-LM log (format: docs/runs-format.md): llama-3-8b on 8 GPUs, tp 1, pp 1,
    dp 8, micro-batch 1, 512 sequences of 8192 in the arguments block; six iteration lines (lines
    12-17) and one memory report (line 18)."""
    args = ["bf16 True", "data_parallel_size 8", "global_batch_size 512", "micro_batch_size 1", "num_layers 32",
            "pipeline_model_parallel_size 1", "seq_length 8192", "tensor_model_parallel_size 1", "world_size 8"]
    if extra_args:
        args[4] = extra_args      # in place of num_layers: the block keeps its line numbers
    text = "------------------------ arguments ------------------------\n"
    text += "".join(f"  {a.split()[0]} {'.' * 20} {a.split()[1]}\n" for a in args)
    text += "-------------------- end of arguments ---------------------\n"
    text += "".join(f" iteration {i}/ 1000 | consumed samples: {i * it_gbs} | elapsed time per iteration (ms): "
                    f"{elapsed} | throughput per GPU (TFLOP/s/GPU): {tflops} | global batch size: {it_gbs} |\n"
                    for i in range(1, 7))
    text += (f"[Rank 0] (after 1 iterations) memory (MB) | allocated: 20000.0 | max allocated: 60000.0 | "
             f"reserved: 70000.0 | max reserved: {max_reserved}\n")
    path.write_text(text)
    return path


LOG_OPTS = ("--model", "llama-3-8b", "--hardware", "h100-sxm", "--check")


def test_megatron_log_figures_beyond_the_hardware_are_refused(cli, tmp_path):
    # H100 SXM's dense bf16 peak is 989 TFLOP/s (hardware/h100-sxm.yaml): 99999 is an MFU of ~101
    log = _megatron_log(tmp_path / "tf.log", tflops="99999.0")
    assert_one_line_error(cli("calibrate", "runs", log, *LOG_OPTS), f"{log}:12:", "above the dense bf16 peak")
    # 1e30 MB (MiB) is ~1e36 bytes, above the 10 TB bound: refused at its own line (18), before the hardware
    log = _megatron_log(tmp_path / "mem.log", max_reserved="1e30")
    assert_one_line_error(cli("calibrate", "runs", log, *LOG_OPTS), f"{log}:18:", "implausible size")
    # 100000 MiB = 97.7 GiB is plausible for some GPU but more than the H100's 80 GiB
    log = _megatron_log(tmp_path / "big.log", max_reserved="100000.0")
    assert_one_line_error(cli("calibrate", "runs", log, *LOG_OPTS), f"{log}:12:", "97.66 GiB is more than the 80 GiB")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_iteration_time_is_named_with_its_line(cli, tmp_path, value):
    log = _megatron_log(tmp_path / "t.log", elapsed=value)
    assert_one_line_error(cli("calibrate", "runs", log, *LOG_OPTS), f"{log}:12:", f"'{value}' is not a finite number")


def test_megatron_log_conflicts_and_dropped_values_get_notes(tmp_path):
    # iteration lines say 256 sequences, the arguments block 512: the timed iterations ran 256
    log = _megatron_log(tmp_path / "gbs.log", it_gbs=256)
    read = read_runs([log], defaults={"model": "llama-3-8b"})
    assert read.runs[0].layout["global_batch"] == 256
    assert any(n.startswith(f"{log}:12:") and "global batch size 256" in n and "used 256" in n for n in read.notes)
    # num_layers_per_virtual_pipeline_stage 0 (line 6) sets no virtual stages, and says so
    log = _megatron_log(tmp_path / "v0.log", extra_args="num_layers_per_virtual_pipeline_stage 0")
    read = read_runs([log], defaults={"model": "llama-3-8b"})
    assert "virtual_stages" not in read.runs[0].layout
    assert any(n.startswith(f"{log}:6: num_layers_per_virtual_pipeline_stage=0") for n in read.notes)


# ----------------------------------------------------------------------------- 4. nothing to fit

def test_nothing_to_fit_is_an_error_and_writes_nothing(cli, tmp_path):
    f = _csv(tmp_path, "runs.csv", "llama-3-8b,h100-sxm,8,1,1,1,8192,64,1,crashed\n",
             head=HEAD.replace("step_time_s", "status"))
    out = tmp_path / "mine.yaml"
    assert_one_line_error(cli("calibrate", "runs", f, "--out", out), "nothing to fit", "1 crashed")
    assert not out.exists()
    assert cli("calibrate", "runs", f, "--check").code == 0     # a check fits nothing: fine


# ----------------------------------------------------------------------------- 5. options

def test_options_are_checked_up_front(cli, tmp_path):
    f = _csv(tmp_path, "runs.csv", "llama-3-8b,h100-sxm,8,1,1,1,8192,64,1,5.0\n")
    # the row names its own hardware and model: the options must still name real ones
    assert_one_line_error(cli("calibrate", "runs", f, "--check", "--hardware", "nosuch"), "unknown hardware 'nosuch'")
    assert_one_line_error(cli("calibrate", "runs", f, "--check", "--model", "nosuch"), "unknown model 'nosuch'")
    assert_one_line_error(cli("calibrate", "runs", f, "--check", "--fit", "kernels.gemm_efficiency"),
                          "--check fits nothing: drop --fit")
    assert_one_line_error(cli("calibrate", "runs", f, "--out", ""), "--out is empty")
    # checked before the runs are read: the missing runs file would be the error otherwise
    missing = tmp_path / "no-such-runs.csv"
    assert_one_line_error(cli("calibrate", "runs", missing, "--out", tmp_path / "nodir" / "x.yaml"),
                          "--out", "does not exist")


# ----------------------------------------------------------------------------- 6./7. extends

def test_a_stack_fitted_on_a_user_stack_file_loads_and_moves_with_it(cli, tmp_path):
    from llmpar.specs import load_stack

    base = tmp_path / "a" / "base" / "s1.yaml"
    base.parent.mkdir(parents=True)
    base.write_text("name: s1\nextends: megatron-core\noverlap: {tp: 0.4}\n")
    out = tmp_path / "a" / "out" / "mine.yaml"
    out.parent.mkdir()
    f = _csv(tmp_path, "runs.csv", "llama-3-8b,h100-sxm,8,1,1,1,8192,64,1,9.0\n")
    res = cli("calibrate", "runs", f, "--stack", base, "--out", out, "--fit", "fixed.per_step_s", "--folds", "0",
              "--json")
    assert res.code == 0, res.err
    fitted = res.json()["parameters"]["fixed.per_step_s"]["after"]
    assert yaml.safe_load(out.read_text())["extends"] == "../base/s1.yaml"   # relative to mine.yaml's folder
    st = load_stack(str(out))
    assert st.fixed.per_step_s == pytest.approx(fitted, abs=1e-6)   # the written value (6 decimals)
    assert st.overlap.tp == 0.4                                      # from s1.yaml through extends
    # both folders moved together: the relative extends still finds the base
    moved = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "a", moved)
    assert load_stack(str(moved / "out" / "mine.yaml")).overlap.tp == 0.4


@pytest.mark.parametrize("kind, base_text, child_text", [
    ("stack", "name: s1\nextends: megatron-core\noverlap: {tp: 0.4}\n", "name: child\nextends: base.yaml\n"),
    ("hardware", "name: mine\nextends: h100-sxm\ngpus_per_node: 4\n", "name: child\nextends: base.yaml\n"),
])
def test_relative_extends_resolve_against_the_file_folder(tmp_path, monkeypatch, kind, base_text, child_text):
    from llmpar.errors import UserError
    from llmpar.specs import load_hardware, load_stack

    sub = tmp_path / "f" / "sub"
    sub.mkdir(parents=True)
    (sub / "base.yaml").write_text(base_text)
    (sub / "child.yaml").write_text(child_text)
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)          # base.yaml is not in the working directory
    if kind == "stack":
        assert load_stack("../f/sub/child.yaml").overlap.tp == 0.4
    else:
        assert load_hardware("../f/sub/child.yaml").gpus_per_node == 4
    (sub / "base.yaml").unlink()
    with pytest.raises(UserError, match=r"file not found: \.\./f/sub/base\.yaml \(relative to \.\./f/sub"):
        (load_stack if kind == "stack" else load_hardware)("../f/sub/child.yaml")


# ----------------------------------------------------------------------------- 8. file:line, formats

@pytest.mark.parametrize("row, needle", [
    ("nosuch,h100-sxm,8,1,1,1,8192,64,1,5.0", "unknown model 'nosuch'"),
    ("llama-3-8b,nosuch,8,1,1,1,8192,64,1,5.0", "unknown hardware 'nosuch'"),
])
def test_unknown_names_in_rows_name_the_row(cli, tmp_path, row, needle):
    f = _csv(tmp_path, "runs.csv", row + "\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), f"{f}:2:", needle)


def test_dtype_and_unit_errors_name_the_row(cli, tmp_path):
    # A100 has no FP8 tensor cores (hardware/a100-80gb.yaml states no fp8 peak): `step` refuses it
    # (layout_settings.check_settings), and so does the runs row, naming itself
    f = tmp_path / "fp8.csv"
    f.write_text("model,hardware,gpus,seq,global_batch,dtype,step_time_s\nllama-3-8b,a100-80gb,8,8192,64,fp8,3\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), f"{f}:2:", "fp8")
    f = tmp_path / "time.csv"
    f.write_text("model,hardware,gpus,seq,global_batch,step_time\nllama-3-8b,h100-sxm,8,8192,64,7.5 parsecs\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), f"{f}:2:", "7.5 parsecs")


def test_a_malformed_json_table_is_reported_as_json(cli, tmp_path):
    f = tmp_path / "runs.json"
    f.write_text('{"runs": [\n  {"model": "x",, }\n]}\n')          # the error is on line 2
    assert_one_line_error(cli("calibrate", "runs", f, "--check"), f"{f}:2: malformed JSON")
    assert "YAML" not in cli("calibrate", "runs", f, "--check").err


def test_a_memory_figure_beyond_any_gpu_is_an_implausible_size(cli, tmp_path):
    # '1e30' in a _gib column is a number (not a unit): 1e30 GiB ~ 1.07e39 bytes > 10 TB
    f = tmp_path / "mem.csv"
    f.write_text("model,hardware,gpus,seq,global_batch,peak_reserved_gib\nllama-3-8b,h100-sxm,8,8192,64,1e30\n")
    res = cli("calibrate", "runs", f, "--check")
    assert_one_line_error(res, f"{f}:2:", "implausible size")
    assert "already gives the unit" not in res.err
    # a plausible figure in the same spelling is read: 6.1e1 GiB = 61 GiB
    f.write_text("model,hardware,gpus,seq,global_batch,peak_reserved_gib\nllama-3-8b,h100-sxm,8,8192,64,6.1e1\n")
    assert read_runs([f]).runs[0].peak_reserved_bytes == 61 * 2**30


def test_relative_extends_of_a_symlinked_file_follows_its_target(tmp_path, monkeypatch):
    # a/h1.yaml says `extends: ../b/h2.yaml`; a link to it from elsewhere still finds b/h2.yaml
    # (the path is relative to where the file's contents live, not to where the link sits)
    from llmpar.specs import load_hardware

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "h2.yaml").write_text("name: base\nextends: h100-sxm\ngpus_per_node: 4\n")
    (tmp_path / "a" / "h1.yaml").write_text("name: h1\nextends: ../b/h2.yaml\n")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "a" / "h1.yaml")
    monkeypatch.chdir(tmp_path)
    assert load_hardware("link.yaml").gpus_per_node == 4


def test_an_impossibly_fast_measurement_is_refused_not_fitted(cli, tmp_path):
    # reliability review, item 6: a 1e-9 s step of llama-3-8b (8,192 x 64 = 524,288 tokens on 8
    # H100) implies an MFU of ~3e9 (about 6 x 8e9 x 524,288 FLOPs / 1e-9 s / 8 / 989e12); it used
    # to be fitted, driving gemm_efficiency to its bound. Now one line naming file:line, exit 2
    f = tmp_path / "tiny.csv"
    f.write_text("model,hardware,gpus,tp,pp,seq,global_batch,micro_batch,zero,step_time_s\n"
                 "llama-3-8b,h100-sxm,8,1,1,8192,64,1,1,1e-9\n"
                 "llama-3-8b,h100-sxm,16,2,1,8192,64,1,1,5.0\n")
    res = cli("calibrate", "runs", f, "--folds", "0")
    assert res.code == 2 and "tiny.csv:2" in res.err and "implies an MFU of" in res.err
    assert "Traceback" not in res.err


def test_a_log_of_another_model_is_refused(cli):
    # reliability review, item 7: the arguments block says num_layers 80 (a 70B-class run) and
    # was fitted as llama-3-8b's 32 layers with virtual stages derived from the 80
    from pathlib import Path

    log = Path(__file__).parent / "fixtures" / "train_logs" / "synthetic_megatron_arguments_block.log"
    res = cli("calibrate", "runs", log, "--model", "llama-3-8b", "--hardware", "h100-sxm", "--check")
    assert res.code == 2 and "layers 80" in res.err and "llama-3-8b has 32" in res.err
