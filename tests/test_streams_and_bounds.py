"""Output that survives any console and input that cannot hang (reliability review, items 11-14)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import assert_one_line_error

from llmpar.errors import UserError

LLMPAR = [sys.executable, "-m", "llmpar"]


def test_an_ascii_console_gets_ascii_not_a_traceback():
    # item 11: PYTHONIOENCODING=ascii used to end in UnicodeEncodeError on the first '·'
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    p = subprocess.run(LLMPAR + ["memory", "llama-3-8b"], capture_output=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert b"Traceback" not in p.stderr
    out = p.stdout.decode("ascii")            # every byte is ASCII
    assert "llama-3-8b  -  on h100-sxm" in out


def test_a_closed_pipe_exits_quietly_with_0():
    # item 14: `llmpar plan ... | head -1` exited 1 (the "nothing feasible" code) with no word
    p = subprocess.Popen(LLMPAR + ["plan", "llama-3-8b", "--gpus", "64", "--top", "1000"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0, err.decode(errors="replace")
    assert b"Traceback" not in err


def test_a_yaml_alias_bomb_is_refused_fast(tmp_path):
    # item 12: nine levels of nine aliases (9^9 = 387 million leaves once expanded) used to hang
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    prev = "a"
    for c in "bcdefghi":
        lines.append(f"{c}: &{c} [" + ", ".join([f"*{prev}"] * 9) + "]")
        prev = c
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines + ["name: x"]) + "\n")
    from llmpar.specs import load_model

    with pytest.raises(UserError, match="aliases expand to more than 2,000,000 values"):
        load_model(str(bomb))                # the walk stops at the bound: about 1 s, not a hang


def test_plan_top_is_bounded(cli):
    # item 13: --top 100000 rendered for 39 s; at most MAX_TOP rows
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "8", "--top", "100000"), "--top", "1,000")
