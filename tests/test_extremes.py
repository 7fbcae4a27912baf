"""Extreme but well-formed inputs through every command (issue 9, "Fuzzing and extremes").

1 GPU; 1,048,576 GPUs; a 10-trillion-parameter model; sequence 1 M; 1 layer; vocab 1; sizes near
2^63. Each command answers (exit 0, 1 = a check failed, or 2 = outside what llmpar models, in one
line), never with a traceback, and a JSON answer holds no NaN, inf or negative number. Inputs past
llmpar's bounds (parallel.MAX_GPUS = 2^22, MAX_SEQ = 2^24, ...) are refused in one line.
Not timed here (docs/architecture.md: benchmarks do not fail on time); the bounds keep each case fast.
"""

from __future__ import annotations

import json
import math

import pytest

# 10T model: 12 h^2 L = 12 * 65536^2 * 200 = 1.03e13 parameters (plus 2 * 256000 * 65536 = 3.4e10
# for embedding and head): a 10-trillion-parameter dense transformer.
TEN_T = """name: ten-t
family: llama
layers: 200
hidden: 65536
heads: 512
kv_heads: 64
ffn_hidden: 262144
vocab: 256000
max_seq: 8192
"""
ONE_LAYER_VOCAB_1 = """name: tiny-1
family: llama
layers: 1
hidden: 512
heads: 8
ffn_hidden: 1536
vocab: 1
max_seq: 2048
"""

# keys that may be negative (a margin below capacity) or null by design
SIGNED = {"margin_bytes", "difference_s", "difference_bytes", "margin_s"}
NULLABLE = {"model_requested", "max_micro_batch", "drawn_idle_fraction", "stage", "extends", "chosen",
            "description", "pareto", "comparison", "nccl_choice", "protocol",
            "recompute_modules"}   # settings.recompute_modules: null unless --recompute-modules is given


def _walk(obj, path=""):
    if isinstance(obj, dict):
        if obj.get("available") is False:   # `collective`: an algorithm that cannot run has no numbers
            return
        for k, v in obj.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, obj


def _check_numbers(doc):
    for path, v in _walk(doc):
        key = path.rsplit(".", 1)[-1].split("[")[0]
        if v is None:
            # echo_json writes NaN/inf as null: a null outside the nullable keys is a NaN or inf
            assert key in NULLABLE, f"{path} is null (NaN or inf?)"
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            assert math.isfinite(v), path
            assert v >= 0 or key in SIGNED, f"{path} = {v}"


@pytest.fixture
def specs(tmp_path):
    (tmp_path / "ten-t.yaml").write_text(TEN_T)
    (tmp_path / "tiny-1.yaml").write_text(ONE_LAYER_VOCAB_1)
    return tmp_path


CASES = [
    # 1 GPU (plan: 8B x 16 B = 128 GB does not fit in 80 GiB: exit 1, one line)
    ("memory llama-3-8b --gpus 1", 0), ("step llama-3-8b --gpus 1", 0), ("plan llama-3-8b --gpus 1", 1),
    ("bubble --pp 1 -m 1", 0), ("step llama-3-8b --gpus 1 --seq 1", 0),
    # 1,048,576 = 2^20 GPUs
    ("memory llama-3-70b --gpus 1048576 --tp 8 --pp 8", 0), ("step llama-3-70b --gpus 1048576 --tp 8 --pp 8", 0),
    ("plan llama-3-70b --gpus 1048576", 0), ("collective all-reduce --gpus 1048576 --size 1GiB", 0),
    ("bubble --pp 1024 -m 1048576", 0),
    # 10-trillion-parameter model on 51,200 = 8 * 50 * 128 GPUs
    ("memory {d}/ten-t.yaml --gpus 51200 --tp 8 --pp 50 --zero 1", 0),
    ("step {d}/ten-t.yaml --gpus 51200 --tp 8 --pp 50 --zero 1", 0),
    ("plan {d}/ten-t.yaml --gpus 65536", 0),
    # sequence 1 M (= 2^20; llama-3-8b's max is 8192: said in a note)
    ("memory llama-3-8b --seq 1048576 --cp 64 --gpus 64 --global-batch 1", 0),
    ("step llama-3-8b --seq 1048576 --cp 64 --gpus 64 --global-batch 1", 0),
    ("plan llama-3-8b --seq 1048576 --gpus 64", 0),
    # 1 layer, vocab 1
    ("memory {d}/tiny-1.yaml", 0), ("step {d}/tiny-1.yaml", 0), ("plan {d}/tiny-1.yaml --gpus 8", 0),
    ("step {d}/tiny-1.yaml --pp 2", 2),
    # sizes near 2^63: refused in one line
    ("step llama-3-8b --seq 9223372036854775807", 2), ("memory llama-3-8b --dp 9223372036854775807", 2),
    ("step llama-3-8b --global-batch 9223372036854775807", 2), ("step llama-3-8b --microbatches 4294967296", 2),
    ("plan --gpus 9223372036854775807", 2), ("plan --gpus 64 --global-batch 4611686018427387904", 2),
    ("plan --gpus 64 --tokens-per-batch 9223372036854775807", 2),
    ("bubble --pp 9223372036854775807 -m 8", 2), ("bubble --pp 8 -m 4294967296", 0),
    ("bubble --pp 4194304 -m 4294967296 --schedule interleaved --virtual-stages 4194304", 0),
    # a message beyond 1 PiB (run/collective.py MAX_MESSAGE_BYTES) is refused since 2026-12-03; 1 PiB is priced
    ("collective all-reduce --gpus 8 --size 9223372036854775807", 2), ("collective all-reduce --gpus 8 --size 1PiB", 0),
]


@pytest.mark.parametrize("line, code", CASES, ids=[c[0].replace("{d}/", "") for c in CASES])
def test_extreme_inputs(cli, specs, line, code):
    args = line.format(d=specs).split()
    res = cli(*args, "--json")
    assert "Traceback" not in res.err
    assert res.code == code, (res.code, res.err[-400:])
    if code == 0:
        _check_numbers(json.loads(res.out))
    else:
        assert len([ln for ln in res.err.splitlines() if ln.strip()]) == 1, res.err


def test_extreme_notes(cli, specs):
    # outside what the model is meant for: said in one line each
    d = cli("step", "llama-3-8b", "--seq", "1048576", "--cp", "64", "--gpus", "64", "--global-batch", "1",
            "--json").json()
    assert any("exceeds llama-3-8b's maximum 8,192" in a for a in d["assumptions"])
    d = cli("step", "llama-3-8b", "--gpus", "1", "--seq", "1", "--json").json()
    assert any("capped at 4,096 sequences" in a for a in d["assumptions"])
    d = cli("bubble", "--pp", "1024", "-m", "1048576", "--json").json()
    assert any("not simulated" in n for n in d["notes"])
