"""Fuzz the spec readers on mutated real inputs (issue 9, "Fuzzing and extremes").

Shipped YAML files (models, hardware, stacks) and Hugging Face config.json files are mutated
byte-wise (deleted, inserted and replaced bytes, including bytes that are not UTF-8), line-wise
(duplicated, dropped, swapped lines) and value-wise (a value replaced by another YAML/JSON type).
Whatever the mutation, the reader either returns a spec or raises llmpar.errors.UserError naming
the file; nothing else escapes.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import REPO
from llmpar.errors import UserError
from llmpar.specs import registry as R
from llmpar.specs.hf import load_hf_config

WORK = Path(tempfile.mkdtemp(prefix="llmpar-fuzz-"))
SHIPPED = {
    "models": sorted((REPO / "models").glob("*.yaml")),
    "hardware": sorted((REPO / "hardware").glob("*.yaml")),
    "stacks": sorted((REPO / "stacks").glob("*.yaml")),
}
LOADERS = {"models": R.load_model, "hardware": R.load_hardware, "stacks": R.load_stack}
ODD_VALUES = ["true", "null", "-1", "0", "1e400", '"12"', "[1, 2]", "{a: 1}", "0x10", "2024-01-01", "~", "!!binary AA==",
              "9223372036854775808", ".nan", "*x", "&x 1", "'", "{", "]"]


@st.composite
def mutated(draw, data: bytes):
    """``data`` after 1-3 mutations: byte edits (any byte, so also invalid UTF-8) or line edits."""
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "dup_line", "drop_line", "swap_lines", "value"]))
        n = len(data)
        lines = data.split(b"\n")
        if op == "delete" and n:
            i = draw(st.integers(0, n - 1))
            data = data[:i] + data[i + draw(st.integers(1, 16)):]
        elif op == "insert":
            i = draw(st.integers(0, n))
            data = data[:i] + draw(st.binary(min_size=1, max_size=8)) + data[i:]
        elif op == "replace" and n:
            i = draw(st.integers(0, n - 1))
            data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
        elif op == "dup_line" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            data = b"\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
        elif op == "drop_line" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            data = b"\n".join(lines[:i] + lines[i + 1:])
        elif op == "swap_lines" and len(lines) > 1:
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = b"\n".join(lines)
        elif op == "value":
            # replace the value of one `key: value` line by an odd YAML value (a type change)
            keyed = [k for k, ln in enumerate(lines) if b":" in ln and not ln.lstrip().startswith(b"#")]
            if keyed:
                k = draw(st.sampled_from(keyed))
                key = lines[k].split(b":", 1)[0]
                lines[k] = key + b": " + draw(st.sampled_from(ODD_VALUES)).encode()
                data = b"\n".join(lines)
    return data


def _load_or_user_error(load, path: Path, data: bytes):
    path.write_bytes(data)
    try:
        load(str(path))
    except UserError as exc:
        msg = str(exc)
        assert "\n" not in msg.strip(), msg
        # names the file (an error in what it extends is prefixed with this file and its `extends`)
        assert str(path) in msg, msg


@pytest.mark.parametrize("kind", sorted(SHIPPED))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_yaml_loaders_only_raise_user_error(kind, data):
    src = data.draw(st.sampled_from(SHIPPED[kind]), label="file")
    blob = data.draw(mutated(src.read_bytes()), label="mutated")
    _load_or_user_error(LOADERS[kind], WORK / f"{kind}-{src.stem}.yaml", blob)


def test_yaml_error_names_file_and_line(tmp_path):
    # a tab where YAML wants indentation, on line 3
    path = tmp_path / "m.yaml"
    path.write_text("name: x\nlayers: 2\n\tbad: 1\n")
    with pytest.raises(UserError, match=rf"{path}:3"):
        R.load_model(str(path))


def _hf_configs():
    from test_hf import DEEPSEEK_V3, GPT2, GPT_NEOX_20B, LLAMA_3_8B, MIXTRAL, QWEN25_72B

    return [LLAMA_3_8B, MIXTRAL, QWEN25_72B, DEEPSEEK_V3, GPT2, GPT_NEOX_20B]


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                        st.text(max_size=5), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                                    st.integers(),
                                                                                                    max_size=2))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_hf_reader_only_raises_user_error(data):
    cfg = dict(data.draw(st.sampled_from(_hf_configs()), label="config"))
    path = WORK / "hf" / "config.json"
    path.parent.mkdir(exist_ok=True)
    if data.draw(st.booleans(), label="bytes"):
        blob = data.draw(mutated(json.dumps(cfg, indent=1).encode()), label="mutated")
    else:   # structural: change, drop or add keys with values of any JSON type
        for _ in range(data.draw(st.integers(1, 3))):
            key = data.draw(st.sampled_from(sorted(cfg)), label="key")
            if data.draw(st.booleans()):
                cfg[key] = data.draw(JSON_VALUES, label="value")
            else:
                cfg.pop(key)
        blob = json.dumps(cfg).encode()
    path.write_bytes(blob)
    try:
        load_hf_config(path)
    except UserError as exc:
        assert str(path) in str(exc), str(exc)


def test_extends_with_a_list_valued_tier_name_is_one_line(cli, tmp_path):
    # found by the fuzzer: a user profile that extends a shipped one with `name: [1, 2]` in a
    # tier made the extends-merge hash a list (TypeError); now the tier is not merged by name and
    # validation says which field is wrong
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nextends: h100-sxm\ntiers:\n  - name: [1, 2]\n    bandwidth: 400 GB/s\n")
    res = cli("memory", "llama-3-8b", "--hardware", str(bad))
    assert res.code == 2 and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1
