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
