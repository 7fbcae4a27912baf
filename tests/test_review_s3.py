"""Silently accepted or misread input (reliability review, S3 items 20, 22, 25, 29, 30, 36)."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

import llmpar
from llmpar.specs import load_hardware, load_stack
from llmpar.specs.registry import read_yaml


def test_yaml_numbers_read_as_yaml_1_2(tmp_path):
    # items 20 and 36: 3e9 is a float (YAML 1.1: text), 010 is ten (1.1: octal 8), 1:30 is text
    # (1.1: sexagesimal 90); underscores, 0o and 0x forms, .inf and dates as before
    f = tmp_path / "n.yaml"
    f.write_text("a: 010\nb: 1:30\nc: 1_000\nd: 0x1f\ne: 0o17\nf: 3e9\ng: -5e-1\nh: 2.5\ni: .inf\n")
    assert read_yaml(f) == {"a": 10, "b": "1:30", "c": 1000, "d": 31, "e": 15, "f": 3e9, "g": -0.5, "h": 2.5,
                            "i": float("inf")}
    hw = tmp_path / "hw.yaml"
    hw.write_text("name: x\nextends: h100-sxm\ngpu: {gemm: {half_flops: 3e9}}\n")
    st = tmp_path / "st.yaml"
    st.write_text("name: x\nextends: megatron-core\noverlap: {tp: 5e-1}\n")
    assert load_hardware(str(hw)).gpu.gemm.half_flops == 3e9 and load_stack(str(st)).overlap.tp == 0.5


@pytest.mark.parametrize("option, value, needle", [
    ("--pue", "1e30", "--pue"), ("--gpu-hour-price", "1e308", "--gpu-hour-price"),
    ("--power-per-gpu", "1e30", "--power-per-gpu"), ("--tokens", "1e30", "--tokens"),
])
def test_cost_options_are_bounded(cli, option, value, needle):
    # item 22: a 1e30 PUE printed 3.88e+19T MWh, a 1e308 price `cost infT`
    args = ["step", "llama-3-8b", "--gpus", "8"] + (["--tokens", "1T"] if option != "--tokens" else [])
    assert_one_line_error(cli(*args, option, value), needle)


@pytest.mark.parametrize("size", ["1.5B", "1e-3"])
def test_collective_sizes_are_whole_bytes(cli, size):
    # item 25: 1.5 B was reported as 2 B, 1e-3 as 0 B, and priced
    assert_one_line_error(cli("collective", "all-gather", "--size", size, "--gpus", "8"), "whole number of bytes")


def test_a_source_named_twice_is_counted_once():
    # item 29: --source X --source X gave rows 2 for one published row
    r = llmpar.validate(["megatron-core-h100-2024", "megatron-core-h100-2024"], limit=1)
    assert len(r.sources) == 1 and r.groups[0]["rows"] == 1


def test_a_result_s_own_layout_feeds_back():
    # item 30: recompute_layers 0 (all layers, as the JSON writes it) was refused by step()
    p = llmpar.plan("llama-3-8b", gpus=64, top=1)
    d = {k: v for k, v in p.best.parallel.as_dict().items() if k not in ("global_batch", "microbatches")}
    r = llmpar.step("llama-3-8b", gpus=64, global_batch=p.global_batch, **d)
    assert r.step_time_s == pytest.approx(p.best.step_time_s, rel=1e-12)


def test_contradictory_moe_specs_are_refused(tmp_path):
    # item 19: an "MoE" model whose every layer is dense, a dense layer named twice, an unknown
    # HF layer type (which used to drop the sliding window to share 0)
    import json

    from llmpar.errors import UserError
    from llmpar.specs import load_model
    from llmpar.specs.hf import load_hf_config

    base = "name: m\nfamily: llama\nlayers: 4\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 100\nmax_seq: 128\n"
    for dense, needle in (("[0, 1, 2, 3]", "no layer is MoE"), ("[0, 0, 1]", "names a layer twice")):
        f = tmp_path / f"m{len(dense)}.yaml"
        f.write_text(base + f"moe: {{experts: 4, top_k: 1, expert_ffn_hidden: 32, dense_layers: {dense}}}\n")
        with pytest.raises(UserError, match=needle):
            load_model(str(f))
    q = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 4, "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 4,
         "num_experts_per_tok": 1, "vocab_size": 100, "max_position_embeddings": 128, "decoder_sparse_step": 9}
    (tmp_path / "q.json").write_text(json.dumps(q))
    with pytest.raises(UserError, match="no layer is MoE"):
        load_hf_config(tmp_path / "q.json")
    g = {"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 4096, "sliding_window": 128,
         "layer_types": ["foo", "bar"]}
    (tmp_path / "g.json").write_text(json.dumps(g))
    with pytest.raises(UserError, match="unknown layer type"):
        load_hf_config(tmp_path / "g.json")


def test_hf_duplicate_key_refused_and_bom_read(tmp_path):
    # item 31: a duplicated key was last-wins; a UTF-8 BOM was refused
    from llmpar.errors import UserError
    from llmpar.specs.hf import load_hf_config

    body = ('{"model_type": "llama", "num_hidden_layers": 2, "num_hidden_layers": 3, "hidden_size": 64, '
            '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 128}')
    (tmp_path / "dup.json").write_text(body)
    with pytest.raises(UserError, match="duplicate key 'num_hidden_layers'"):
        load_hf_config(tmp_path / "dup.json")
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + body.replace('"num_hidden_layers": 2, ', "").encode())
    assert load_hf_config(tmp_path / "bom.json").layers == 3


def test_cache_key_tells_a_date_from_its_string(tmp_path, monkeypatch):
    # item 23: with a cached valid spec, an invalid one that differs only in a value's type (a YAML
    # date vs the same text quoted) hashed the same and was let through
    from llmpar.errors import UserError
    from llmpar.specs import load_model

    monkeypatch.setenv("LLMPAR_CACHE_DIR", str(tmp_path / "cache"))
    base = "name: d\nfamily: llama\nlayers: 2\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 100\nmax_seq: 128\n"
    (tmp_path / "s.yaml").write_text(base + 'description: "2024-01-01"\n')
    (tmp_path / "d.yaml").write_text(base + "description: 2024-01-01\n")
    load_model(str(tmp_path / "s.yaml"))
    with pytest.raises(UserError, match="description"):
        load_model(str(tmp_path / "d.yaml"))


def test_a_renamed_network_tier_says_how_tiers_merge(tmp_path):
    # item 21: the message named no merge; the file had exactly one null tier
    from llmpar.errors import UserError

    f = tmp_path / "ib.yaml"
    f.write_text("name: x\nextends: h100-sxm\ntiers:\n  - {name: ib, kind: infiniband, domain_size: null, "
                 "bandwidth: 400 Gb/s, latency: 3 us}\n")
    with pytest.raises(UserError, match="merges its tiers with the base's by name"):
        load_hardware(str(f))


@pytest.mark.parametrize("args, needles", [
    # item 15: --params (a bare count) has no activations; these options used to change nothing
    (("memory", "--params", "7.5B", "--dp", "8", "--seq", "4096"), ("--seq", "--params")),
    (("memory", "--params", "7.5B", "--dp", "8", "--micro-batch", "4", "--recompute", "full"),
     ("--micro-batch", "--recompute")),
    # item 17: the megatron convention's formula fixes fp32 main gradients
    (("memory", "--params", "7.5B", "--dp", "64", "--zero", "1", "--convention", "megatron", "--grad-dtype", "bf16"),
     ("--grad-dtype bf16", "--convention megatron")),
    # item 18: --seq was dropped when --context was given
    (("memory", "llama-3-8b", "--inference", "--seq", "100000", "--context", "16"), ("--seq", "--context")),
    # item 16: modules the model does not have re-ran nothing, under a "selective recompute" label
    (("memory", "llama-3-8b", "--gpus", "8", "--recompute", "selective", "--recompute-modules", "moe,mla_up_proj"),
     ("no MoE layers", "no MLA attention")),
])
def test_options_that_change_nothing_are_refused(cli, args, needles):
    assert_one_line_error(cli(*args), *needles)


# (test_params_keeps_the_batch_split: superseded by tests/test_params_moot_batch.py, where the batch
# split is refused with --params unless the stack's states depend on it)


def test_more_input_refused_with_the_reason(cli, tmp_path):
    # item 26: a tab- or semicolon-separated runs CSV; item 27: an empty --allow entry and a
    # contradictory --fix (exit 2, as step says it, not 1); item 9: ranks that cannot fill the nodes
    tabs = tmp_path / "tabs.csv"
    tabs.write_text("model\thardware\tgpus\ttp\tpp\tseq\tglobal_batch\tstep_time_s\n"
                    "llama-3-8b\th100-sxm\t8\t1\t1\t8192\t64\t6.0\n")
    # tabs are read as the separator (unambiguous); semicolons are refused (a decimal comma may follow)
    res = cli("calibrate", "runs", tabs, "--check", "--json")
    assert res.code == 0, res.err            # --check without --tolerance reports, never fails
    assert res.json()["rows"][0]["layout"]["gpus"] == 8
    semi = tmp_path / "semi.csv"
    semi.write_text("model;hardware;gpus;tp;pp;seq;global_batch;step_time_s\nllama-3-8b;h100-sxm;8;1;1;8192;64;6,0\n")
    assert_one_line_error(cli("calibrate", "runs", semi, "--check"), "separated by semicolons")
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "64", "--allow", "tp=1,,2"), "empty entry")
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "64", "--fix", "virtual_stages=2,schedule=1f1b"),
                          "needs the interleaved schedule")
    from _synthetic_nccl import SWEEP, TRUTH_YAML, write_log
    import numpy as np

    from llmpar.cost.collectives import collective_time

    (tmp_path / "truth.yaml").write_text(TRUTH_YAML)
    truth = load_hardware(str(tmp_path / "truth.yaml"))
    S = np.array(SWEEP)
    log = write_log(tmp_path / "ar.txt", "all_reduce", 8, 1, S, collective_time(truth, "all_reduce", S, 8, 8))
    for nodes in ("3", "16"):     # 8 ranks on 3 nodes (uneven) or on 16 (more nodes than ranks)
        assert_one_line_error(cli("calibrate", "check", log, "--hardware", tmp_path / "truth.yaml", "--nodes", nodes),
                              "must fill the nodes evenly")


def test_an_inline_model_cannot_shadow_a_shipped_one(cli, tmp_path):
    # item 8: every row said llama-3-8b while it was a 95K-parameter model
    f = tmp_path / "shadow.yaml"
    f.write_text("models:\n  llama-3-8b: {family: llama, layers: 2, hidden: 64, heads: 4, ffn_hidden: 128, vocab: 100, "
                 "max_seq: 128}\nruns:\n  - {model: llama-3-8b, hardware: h100-sxm, gpus: 1, seq: 128, global_batch: 8, "
                 "step_time_s: 0.01}\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--folds", "0"), "name of a shipped model")


def test_a_sweep_hardware_path_with_a_comma(cli, tmp_path):
    # item 32: `--hardware f/hw/a,b.yaml` was split at the comma
    f = tmp_path / "a,b.yaml"
    f.write_text("name: ab\nextends: h100-sxm\n")
    res = cli("sweep", "llama-3-8b", "--gpus", "8", "--hardware", f, "--json")
    assert res.code == 0, res.err
    assert res.json()["hardware"] == ["ab"]


def test_calibrate_fit_refuses_what_cannot_be_fitted(cli, tmp_path):
    # item 10: one row "fitted" five parameters at 0.0 % error; impossible times (1e-9 us) were
    # fitted at a 3e12 % error; both wrote a profile. Now one line each, and nothing written
    from conftest import REPO
    from _synthetic_nccl import SWEEP, TRUTH_YAML, write_log
    import numpy as np

    from llmpar.cost.collectives import collective_time

    one = REPO / "tests" / "fixtures" / "nccl" / "cputime_periter_broadcast.txt"     # a single-size broadcast
    out = tmp_path / "x.yaml"
    # (an L40S log: --gpu restates it for the H100 profile, so the one-row rule is what refuses it)
    assert_one_line_error(cli("calibrate", "fit", one, "--hardware", "h100-sxm", "--gpu", "H100", "--out", out),
                          "1 broadcast row")
    (tmp_path / "truth.yaml").write_text(TRUTH_YAML)
    truth = load_hardware(str(tmp_path / "truth.yaml"))
    S = np.array(SWEEP)
    fast = write_log(tmp_path / "fast.txt", "all_reduce", 8, 1, S, 1e-6 * collective_time(truth, "all_reduce", S, 8, 8))
    assert_one_line_error(cli("calibrate", "fit", fast, "--hardware", tmp_path / "truth.yaml", "--out", out),
                          "do not describe this link")
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    # newcomer review, defect 5: a bare number where a unit is needed was taken literally
    (("memory", "--params", "70", "--dp", "8"), "write 70B"),
    (("memory", "llama-3-8b", "--gpus", "8", "--reserve", "6"), "write 6GiB"),
])
def test_a_bare_number_that_needs_a_unit_is_refused(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_numbers_with_units_and_large_bare_numbers_still_read(cli):
    assert cli("memory", "--params", "7e9", "--dp", "8", "--json").code == 0          # 7e9 parameters
    assert cli("memory", "llama-3-8b", "--gpus", "8", "--reserve", "0", "--json").code == 0
    assert cli("memory", "llama-3-8b", "--gpus", "8", "--reserve", "6GiB", "--json").code == 0


@pytest.mark.parametrize("args, needle", [
    # item 24: a size below one element wrote a log without rows; an empty --collectives ran the
    # default set
    (("calibrate", "bench", "--sizes", "3B", "--collectives", "all_reduce"), "below one element"),
    (("calibrate", "bench", "--collectives", ""), "--collectives is empty"),
    # and --out /proc/x surfaced as torchrun's banner: the folder is probed before torchrun starts
    (("calibrate", "bench", "--launch", "--nproc", "2", "--out", "/proc/llmpar-x"), "cannot write into /proc/llmpar-x"),
])
def test_bench_edge_inputs_are_refused_before_any_process(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


def test_formatting_at_the_extremes(cli):
    # item 33: a quadrillion-parameter count read "77001.02T"; `step` said "largest micro-batch
    # that fits: 0" where `memory` says "no micro-batch fits"
    from llmpar.units import fmt_count

    assert fmt_count(7.7e16) == "77.00P" and fmt_count(7e9) == "7.00B"
    assert fmt_count(3.88e31) == "3.88e+31"    # not 38,800,000,000,000,000.00P (nor 3.88e+19T)
    res = cli("step", "llama-3-70b", "--gpus", "8")
    assert res.code == 0 and "no micro-batch fits" in res.out and "fits: 0" not in res.out


@pytest.mark.parametrize("text, needle", [
    # item 35: a newline and an ANSI escape in name: were written straight to the terminal; a
    # blank name gave a header starting with blanks; an escape in free text is refused too
    ('name: "a\\nb\\x1b[31mRED"\nextends: llama-3-8b\n', "a name is one printable line"),
    ("name: ''\nextends: llama-3-8b\n", "is blank"),
    ("name: ' x'\nextends: llama-3-8b\n", "leading or trailing blanks"),
    ('name: mine\ndescription: "\\x1b[2J"\nextends: llama-3-8b\n', "control character"),
    ('name: mine\naliases: ["a\\tb"]\nextends: llama-3-8b\n', "a name is one printable line"),
])
def test_spec_text_is_printable(cli, tmp_path, text, needle):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    assert_one_line_error(cli("memory", str(f), "--gpus", "8"), needle)


def test_a_model_file_is_not_taken_for_the_shipped_model(cli, tmp_path):
    # item 35: a file named llama-3-70b holding a 2-layer model printed as llama-3-70b; a file that
    # extends llama-3-8b with 64 layers showed the base's name and source
    shadow = tmp_path / "shadow.yaml"
    shadow.write_text("name: llama-3-70b\nextends: llama-3-8b\nlayers: 2\n")
    assert_one_line_error(cli("memory", str(shadow), "--gpus", "8"), "is a shipped model's", "name of its own")
    deep = tmp_path / "deep.yaml"
    deep.write_text("extends: llama-3-8b\nlayers: 64\n")
    got = cli("memory", str(deep), "--gpus", "8", "--json").json()
    assert got["model"] == "deep"
    from llmpar.specs import load_model

    m = load_model(str(deep))
    assert m.layers == 64 and m.source.endswith("extending llama-3-8b") and m.aliases == []
    # a verbatim copy of a shipped file is that model, and keeps its name
    from pathlib import Path

    from llmpar.specs.registry import spec_lookup

    copy = tmp_path / "copy.yaml"
    copy.write_text(Path(spec_lookup("models", "llama-3-8b")[1]).read_text())
    assert cli("memory", str(copy), "--gpus", "8", "--json").json()["model"] == "llama-3-8b"


def test_hardware_and_tier_names_are_printable_too(cli, tmp_path):
    # item 35 is a class: the GPU's and a tier's names are printed in every header (the network
    # note names the scale-out tier), so they are names like the spec's own
    f = tmp_path / "h.yaml"
    f.write_text('name: mine\nextends: h100-sxm\ngpu: {name: "H100\\x1b[2J"}\n')
    assert_one_line_error(cli("memory", "llama-3-8b", "--hardware", str(f)), "a name is one printable line")
