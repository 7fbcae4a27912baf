"""`llmpar models` and `llmpar hardware` (listing, show, --json, bad names)."""

import pytest
from conftest import assert_one_line_error


def test_models_list_json(cli):
    res = cli("models", "--json")
    assert res.code == 0, res.err
    rows = {r["name"]: r for r in res.json()}
    for name in ("gpt3-175b", "megatron-gpt-1t", "llama-3.1-405b", "mixtral-8x7b", "deepseek-v3", "qwen2.5-72b"):
        assert name in rows
    ll = rows["llama-3-70b"]
    assert "llama-70b" in ll["aliases"]
    # Llama-3-70B 70,553,706,496 (HF; derivation in test_params.py); 64 heads, 8 KV heads
    assert (ll["params_total"], ll["heads"], ll["kv_heads"], ll["moe"]) == (70_553_706_496, 64, 8, False)
    assert set(rows["llama-3.1-405b"]["aliases"]) >= {"llama-405b", "llama-3-405b"}
    mx = rows["mixtral-8x7b"]
    # Mixtral: 46,702,792,704 total, 12,879,925,248 active (test_params.py), 8 experts top-2
    assert (mx["moe"], mx["experts"], mx["top_k"], mx["params_active"]) == (True, 8, 2, 12_879_925_248)


def test_models_list_table(cli):
    res = cli("models")
    assert res.code == 0, res.err
    assert "llama-3.1-405b" in res.out and "llama-405b" in res.out
    # DeepSeek-V3 671,026,419,200 -> "671.03" billions; 37,552,297,472 active -> "37.55"
    line = next(ln for ln in res.out.splitlines() if "deepseek-v3 " in ln)
    assert "671.03" in line and "37.55" in line and "256 experts, top-8" in line


def test_models_show_json(cli):
    res = cli("models", "show", "llama-70b", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["model"] == "llama-3-70b" and d["alias_typed"] == "llama-70b"
    b = d["params"]
    # Llama-3-70B: embedding = head = 128256*8192 = 1,050,673,152; attention 80*(2*8192^2 + 2*8192*1024)
    # = 12,079,595,520; MLP 80*3*8192*28672 = 56,371,445,760; norms 80*2*8192 + 8192 = 1,318,912
    assert b["embedding"] == b["head"] == 1_050_673_152
    assert b["attention"] == 12_079_595_520
    assert b["mlp"] == 56_371_445_760
    assert b["norms"] == 1_318_912
    assert b["total"] == b["active"] == 70_553_706_496
    assert d["params_per_layer"]["attention"] == 150_994_944  # 2*8192^2 + 2*8192*1024
    assert d["spec"]["kv_heads"] == 8


def test_models_show_table(cli):
    res = cli("models", "show", "deepseek-v3")
    assert res.code == 0, res.err
    # 58 MoE layers * 256 experts * 3*7168*2048 = 653,908,770,816 routed-expert parameters
    assert "653,908,770,816" in res.out
    assert "671,026,419,200" in res.out and "37,552,297,472" in res.out
    assert "kv_lora_rank=512" in res.out


def test_models_show_hf_path(tmp_path, cli):
    # a config.json path works in place of a name: GPT-2 small = 124,439,808 (test_hf.py)
    cfg = tmp_path / "gpt2" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text('{"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, '
                   '"n_positions": 1024, "vocab_size": 50257}')
    res = cli("models", "show", cfg, "--json")
    assert res.code == 0, res.err
    assert res.json()["params"]["total"] == 124_439_808


def test_models_bad_name(cli):
    res = cli("models", "show", "lama-3-70b")
    assert_one_line_error(res, "unknown model", "did you mean", "llama-3-70b")


def test_models_bad_yaml(tmp_path, cli):
    bad = tmp_path / "m.yaml"
    bad.write_text("name: x\nlayers: [1,\n")
    assert_one_line_error(cli("models", "show", bad), "malformed YAML", str(bad))
    bad.write_text("name: x\nlayers: 0\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 100\nmax_seq: 16\n")
    assert_one_line_error(cli("models", "show", bad), "layers")


def test_hardware_list(cli):
    res = cli("hardware", "--json")
    assert res.code == 0, res.err
    rows = {r["name"]: r for r in res.json()}
    h = rows["h100-sxm"]
    # DGX H100: 80 GiB = 85,899,345,920 bytes; bf16 989 TFLOP/s dense; 8 GPUs per node;
    # NVLink 4 900 GB/s bidirectional = 450 per direction; one 400 Gb/s NDR NIC per GPU = 50 GB/s
    assert h["memory_bytes"] == 80 * 2**30
    assert h["peak_tflops"]["bf16"] == 989
    assert h["gpus_per_node"] == 8
    assert [t["bandwidth_per_direction_GBps"] for t in h["tiers"]] == [450, 50]
    assert "h100" in h["aliases"]
    table = cli("hardware")
    assert table.code == 0 and "h100-sxm" in table.out and "450 GB/s/dir" in table.out
    # --units gib shows 80.0 (GiB) instead of 85.9 (GB)
    assert "85.9" in table.out and "80.0" in cli("hardware", "--units", "gib").out


def test_hardware_show(cli):
    res = cli("hardware", "show", "h100", "--json")
    assert res.code == 0, res.err
    d = res.json()
    assert d["name"] == "h100-sxm"
    assert d["tiers"][0]["kind"] == "nvswitch" and d["tiers"][0]["domain_size"] == 8
    assert d["tiers"][0]["in_network_reduction"] is True
    assert d["tiers"][1]["domain_size"] is None
    # the JSON carries the profile's own number, converted to seconds (the YAML states it in us)
    from llmpar.specs import load_hardware

    assert d["tiers"][1]["latency_s"] == load_hardware("h100-sxm").scale_out.latency
    # the GEMM curve and the host memory the time model and the planner read (a review found them
    # missing from the JSON): hardware/h100-sxm.yaml states max_efficiency 0.803 (MAMF 794.5 / 989),
    # half_dim 64, half_flops 3.18e9; 256 GB of host memory per GPU, its own host link
    assert d["gemm"] == {"max_efficiency": 0.803, "half_dim": 64.0, "half_flops": 3.18e9}
    assert d["host_memory_per_gpu_bytes"] == 256e9 and d["gpus_per_host_link"] == 1
    assert d["tiers"][0]["ll128_latency_s"] == pytest.approx(8e-6) and d["tiers"][0]["inr_efficiency"] == 0.69
    assert d["spec"]["gpu"]["gemm"] == d["gemm"]
    res = cli("hardware", "show", "h100-sxm")
    assert res.code == 0 and "Network tiers" in res.out and "infiniband" in res.out


def test_hardware_bad_name(cli):
    assert_one_line_error(cli("hardware", "show", "h100-sxn"), "unknown hardware", "h100-sxm")
    assert_one_line_error(cli("hardware", "show", "missing/profile.yaml"), "not found")


def test_shipped_names_are_file_stems_and_aliases_never_shadow_a_file():
    """registry.spec_lookup resolves a canonical name by opening ``<name>.yaml`` directly (so
    `llmpar memory llama-3-70b` does not parse all 45 model files for their aliases). That is
    only the same answer as the full alias index when every shipped spec's ``name`` is its
    file's stem and no alias equals another spec's stem; both are checked here for every kind."""
    import pytest

    from llmpar.specs import registry

    for kind in ("models", "hardware", "stacks"):
        stems = {p.stem for p in registry.data_dir(kind).glob("*.yaml")}
        idx = registry.spec_index(kind)
        for key, (canon, path) in idx.items():
            assert canon == path.stem, (kind, key, canon, path.name)
            assert key == canon or key not in stems, (kind, key, "alias shadows a file")
            assert registry.spec_lookup(kind, key) == (canon, path)
        assert registry.spec_lookup(kind, "no-such-spec") is None
        assert registry.spec_lookup(kind, "") is None
    with pytest.raises(registry.UserError, match="unknown model 'llama-3-7'"):
        registry.load_model("llama-3-7")
