"""Spec loading refuses what it used to accept silently (issue 9, items 7 and 8).

Each test failed on main before the fix: duplicate keys kept the last value, non-UTF-8 bytes raised
UnicodeDecodeError in every command, `layers: true` was read as 1 layer, a quoted number was
coerced, and an HF config whose first_k_dense_replace covers every layer gave a "MoE" model with
zero MoE layers.
"""

from __future__ import annotations

import json

import pytest

from conftest import REPO, assert_one_line_error
from llmpar.errors import UserError
from llmpar.specs import reading
from llmpar.specs import registry as R
from llmpar.specs.hf import load_hf_config

LLAMA_YAML = REPO / "models" / "llama-3-8b.yaml"


def _copy_with(tmp_path, src, old: str, new: str, name="m.yaml"):
    text = src.read_text()
    assert old in text, old
    out = tmp_path / name
    out.write_text(text.replace(old, new, 1))
    return out


# ---------------------------------------------------------------------------- every shipped file

@pytest.mark.parametrize("kind", ["hardware", "models", "stacks"])
def test_every_shipped_yaml_loads_strictly(kind):
    """The duplicate-key loader and strict types accept every file we ship (hardware extends resolved)."""
    names = R.shipped_names(kind)
    assert names
    for name in names:
        if kind == "hardware":
            R.load_hardware(name)
        elif kind == "stacks":
            R.load_stack(name)
        else:
            R.load_model(name)


# ---------------------------------------------------------------------------- duplicate keys

def test_duplicate_key_names_file_and_line(tmp_path):
    # line 1 `name: x`, line 2 `layers: 2`, line 3 `layers: 4`: PyYAML kept 4 without a word
    path = tmp_path / "dup.yaml"
    path.write_text("name: x\nlayers: 2\nlayers: 4\n")
    with pytest.raises(UserError) as exc:
        R.read_yaml(path)
    msg = str(exc.value)
    assert f"{path}:3" in msg and "duplicate key 'layers'" in msg and "line 2" in msg


def test_duplicate_nested_key(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("gpu:\n  memory: 80 GiB\n  name: a\n  memory: 40 GiB\n")
    with pytest.raises(UserError, match=r"dup.yaml:4.*duplicate key 'memory'"):
        R.read_yaml(path)


def test_duplicate_key_in_hardware_file_through_cli(tmp_path, cli):
    hw = (REPO / "hardware" / "h100-sxm.yaml").read_text()
    path = tmp_path / "hw.yaml"
    path.write_text(hw + "\nname: again\n")   # h100-sxm.yaml states name: on line 6
    res = cli("memory", "llama-3-8b", "--hardware", str(path))
    assert_one_line_error(res, "duplicate key", str(path))


# ---------------------------------------------------------------------------- bytes that are not UTF-8

@pytest.mark.parametrize("command", [
    ["memory", "llama-3-8b"], ["step", "llama-3-8b"], ["plan", "llama-3-8b", "--gpus", "8"],
])
def test_non_utf8_hardware_is_one_line(tmp_path, cli, command):
    path = tmp_path / "bad.yaml"
    # line 1 ok, byte 0xff on line 2 (0xff never occurs in UTF-8)
    path.write_bytes(b"name: bad\ndescription: caf\xff\n")
    res = cli(*command, "--hardware", str(path))
    assert_one_line_error(res, f"{path}:2", "utf-8")


def test_non_utf8_model_yaml(tmp_path, cli):
    path = tmp_path / "m.yaml"
    path.write_bytes(LLAMA_YAML.read_bytes().replace(b"description:", b"description: \xc3\x28", 1))
    res = cli("memory", str(path))
    assert_one_line_error(res, str(path), "utf-8")


# ---------------------------------------------------------------------------- strict types

@pytest.mark.parametrize("old,new,field", [
    ("layers: 32", "layers: true", "layers"),          # bool is not an int (was read as 1 layer)
    ("layers: 32", 'layers: "32"', "layers"),          # a string is not a number
    ("hidden: 4096", "hidden: 4096.0", "hidden"),      # a float is not an int
    ("tied_embeddings: false", "tied_embeddings: 0", "tied_embeddings"),   # 0 is not false
])
def test_model_yaml_strict_types(tmp_path, cli, old, new, field):
    path = _copy_with(tmp_path, LLAMA_YAML, old, new)
    with pytest.raises(UserError, match=field):
        R.load_model(str(path))
    assert_one_line_error(cli("memory", str(path)), field)


def test_hardware_yaml_strict_types(tmp_path):
    # gpus_per_node: true would have been one GPU per node
    src = REPO / "hardware" / "h100-sxm.yaml"
    text = src.read_text()
    import re

    m = re.search(r"^(\s*gpus_per_node:\s*)(\d+)", text, re.M)
    assert m, "h100-sxm.yaml states gpus_per_node"
    path = tmp_path / "hw.yaml"
    path.write_text(text[:m.start(2)] + "true" + text[m.end(2):])
    with pytest.raises(UserError, match="gpus_per_node"):
        R.load_hardware(str(path))


def test_stack_yaml_strict_types(tmp_path):
    # a user stack extending a shipped one: overlap.dp "0.5" (a string) or true is refused
    for bad in ('"0.5"', "true"):
        path = tmp_path / "s.yaml"
        path.write_text(f"name: mine\nextends: megatron-core\noverlap:\n  dp: {bad}\n")
        with pytest.raises(UserError, match="overlap"):
            R.load_stack(str(path))
    path.write_text("name: mine\nextends: megatron-core\noverlap:\n  dp: 0.5\n")
    assert R.load_stack(str(path)).overlap.dp == 0.5


# ---------------------------------------------------------------------------- HF: MoE with no MoE layer

def test_hf_first_k_dense_covering_every_layer_is_refused(tmp_path, cli):
    from test_hf import DEEPSEEK_V3

    cfg = dict(DEEPSEEK_V3, num_hidden_layers=4, first_k_dense_replace=5)   # layers 0..3 all < 5: all dense
    path = tmp_path / "ds" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match="first_k_dense_replace = 5") as exc:
        load_hf_config(path)
    assert str(path) in str(exc.value)
    assert_one_line_error(cli("memory", "--hf", str(path)), "first_k_dense_replace")
    # first_k_dense_replace = 3 of 4 layers leaves one MoE layer: accepted
    cfg["first_k_dense_replace"] = 3
    path.write_text(json.dumps(cfg))
    assert load_hf_config(path).moe_layers == 1


def test_hf_model_type_not_a_string(tmp_path):
    # found by tests/test_fuzz_specs.py: "model_type": [] raised TypeError (unhashable) on main
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": []}))
    with pytest.raises(UserError, match="unsupported model_type"):
        load_hf_config(path)


# ---------------------------------------------------------------------------- the parse cache
def test_read_yaml_parses_once_and_hands_out_copies(tmp_path, monkeypatch):
    # specs/reading.py keeps each small file's mapping by its bytes: the same bytes are parsed once
    # per process, every caller gets its own copy, and new bytes (even the same size, written
    # within the file system's time resolution) are parsed again
    path = tmp_path / "hw.yaml"
    # the name is this test's folder: bytes no other test has parsed, so exactly one parse is due
    name = tmp_path.name
    path.write_text(f"gpu:\n  memory: 80 GiB\nname: {name}\n")
    calls = []
    parse = reading._parse_yaml
    monkeypatch.setattr(reading, "_parse_yaml", lambda p, raw: calls.append(p) or parse(p, raw))
    first = reading.read_yaml(path)
    first["gpu"]["memory"] = "1 GiB"            # a caller's change reaches no other caller
    assert reading.read_yaml(path) == {"gpu": {"memory": "80 GiB"}, "name": name}
    assert len(calls) == 1
    path.write_text(f"gpu:\n  memory: 40 GiB\nname: {name}\n")   # same size, new bytes
    assert reading.read_yaml(path)["gpu"]["memory"] == "40 GiB"
    assert len(calls) == 2


def test_read_yaml_errors_are_not_cached_and_name_each_file(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for p in (a, b):
        p.write_text("name: x\nlayers: 2\nlayers: 4\n")
    for p in (a, b):
        with pytest.raises(UserError, match=rf"{p.name}:3.*duplicate key 'layers'"):
            reading.read_yaml(p)


@pytest.mark.parametrize("body, field, integer", [("vocab: 1.28e+5", "vocab", "128000"), ("layers: 3e1", "layers", "30")])
def test_an_integer_in_e_notation_says_what_to_write(tmp_path, body, field, integer):
    # YAML 1.1/1.2 read 1.28e+5 as a float; the strict integer field said "Input should be a valid
    # integer" of a whole number (reliability review, item 20, re-checked 2026-12-03): now the field,
    # why, and the integer to write (1.28e5 = 128,000; 3e1 = 30)
    f = tmp_path / "m.yaml"
    f.write_text(f"name: m\nextends: llama-3-8b\n{body}\n")
    with pytest.raises(UserError, match=rf"field '{field}': a float where an integer is needed.*write {integer}$"):
        R.load_model(str(f))
    f.write_text("name: m\nextends: llama-3-8b\nlayers: 3.5\n")     # not whole: pydantic's own message
    with pytest.raises(UserError, match="field 'layers': Input should be a valid integer"):
        R.load_model(str(f))
