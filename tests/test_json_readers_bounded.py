"""Every JSON reader is bounded and strict as the YAML readers are (reliability review, items 12
and 31, re-checked 2026-12-03): a document nested deeper than Python's recursion limit (json's
decoder recurses once per level; 5,000 levels raised RecursionError through the HF config reader,
`calibrate parse` and `calibrate serve`) and a key given twice (nccl-tests -J JSON kept the last
"size" silently) are one line naming the file, exit 2."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize("args, name", [
    (("memory", "--hf", "{f}", "--gpus", "8"), "config.json"),
    (("calibrate", "parse", "{f}"), "ar.json"),
    (("calibrate", "serve", "{f}", "--model", "llama-3-8b", "--hardware", "h100-sxm"), "result.json"),
])
def test_a_deeply_nested_json_file_is_one_line(cli, tmp_path, args, name):
    f = tmp_path / name
    # an object at the top (as each reader expects) whose first value nests 5,000 lists deep
    f.write_text('{"a": ' + DEEP + "}")
    res = cli(*[a.format(f=f) for a in args])
    assert_one_line_error(res, name, "nested too deeply")


def test_a_key_given_twice_in_nccl_tests_json_is_refused(cli, tmp_path):
    f = tmp_path / "ar.json"
    f.write_text('{"results": [{"size": 2048, "size": 4096}]}')
    assert_one_line_error(cli("calibrate", "parse", f), "ar.json", "duplicate key 'size'")


# ----------------------------------------------------------------- one JSON reader, one message form
def test_every_json_reader_is_the_one_reader():
    """The four JSON inputs (HF config.json, nccl-tests -J, runs tables, serving results) read
    through specs.reading.loads_json: none calls json.loads itself (its duplicate-key, nesting and
    message rules would then drift apart, as they had: four wrappers, four wordings)."""
    import pathlib

    src = pathlib.Path(__file__).resolve().parents[1] / "src" / "llmpar"
    readers = ["specs/hf.py", "calibrate/nccl_json.py", "calibrate/runs_io.py", "calibrate/serve_logs.py"]
    for rel in readers:
        text = (src / rel).read_text(encoding="utf-8")
        assert "json.loads(" not in text and "loads_json(" in text, rel


def test_loads_json_names_the_place_and_the_kind():
    from llmpar.specs.reading import JSONReadError, loads_json

    # a record on line 7 of its file: the message names line 7, not the decoder's line 1
    # ('{"a": [1,]}': after "1," the decoder expects a value at column 10 and finds "]")
    with pytest.raises(JSONReadError, match=r"^f.jsonl:7: malformed JSON \(x\): Expecting value \(column 10\)$"):
        loads_json('{"a": [1,]}', "f.jsonl", "JSON (x)", line=7)
    # the text ends inside an object: truncated, on the decoder's own line 2
    with pytest.raises(JSONReadError, match=r"^f.json:2: truncated JSON: "):
        loads_json('{"a":\n 1', "f.json")
    with pytest.raises(JSONReadError, match=r"^f.json: JSON: duplicate key 'a'$"):
        loads_json('{"a": 1, "a": 2}', "f.json")
    with pytest.raises(JSONReadError, match=r"^f.json: JSON nested too deeply$"):
        loads_json("[" * 200_000, "f.json")
    # Infinity reads as a float, for the reader's own checks to name its field
    assert loads_json('{"request_rate": Infinity}', "f.json") == {"request_rate": float("inf")}
