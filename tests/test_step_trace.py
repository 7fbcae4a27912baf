"""`step --trace`: the modelled step as a Trace Event Format file (docs/time-model.md, Trace)."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error

import llmpar
from llmpar.step_trace import chrome_trace


def _spans(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


@pytest.mark.parametrize("kw", [
    dict(model="llama-3-70b", gpus=64, tp=8, pp=2, zero=1, global_batch=128),
    dict(model="llama-3.1-405b", gpus=16384, tp=8, pp=16, virtual_stages=4, zero=1, global_batch=2048),
    dict(model="llama-3-8b", gpus=8, zero=3, global_batch=64, offload_layers=8),
    dict(model="mixtral-8x7b", gpus=64, tp=2, pp=4, ep=8, zero=1, global_batch=256, schedule="gpipe"),
])
def test_spans_add_up_to_the_step(kw):
    """Every stage's chunks take m x (F + B) (the step's per-stage times, offload copies included);
    the last event ends at step_time_s: the pipeline (the closed form the step uses, equal to the
    simulation) + exposed DP + optimizer + fixed."""
    model = kw.pop("model")
    r = llmpar.step(model, **kw)
    tr = chrome_trace(r)
    spans = _spans(tr)
    for e in spans:
        assert set(e) >= {"name", "ph", "ts", "dur", "pid", "tid"} and e["dur"] >= 0
    end = max(e["ts"] + e["dur"] for e in spans) / 1e6
    assert end == pytest.approx(r.step_time_s, rel=1e-9)
    m = int(r.parallel.microbatches)
    off = r.breakdown_s.get("offload", 0.0)
    chunk_total = m * (r.detail["stage_forward_s"] + r.detail["stage_backward_s"]) + off
    for stage in range(int(r.parallel.pp)):
        busy = sum(e["dur"] for e in spans if e["tid"] == stage and e["cat"] in ("forward", "backward")) / 1e6
        assert busy == pytest.approx(chunk_total, rel=1e-9)
    assert sum(1 for e in spans if e["cat"] == "forward") == m * int(r.parallel.pp) * int(r.parallel.virtual_stages)
    json.dumps(tr)   # plain JSON


def test_zero_bubble_schedules_are_refused():
    r = llmpar.step("llama-3-70b", gpus=64, tp=8, pp=4, zero=1, global_batch=128, schedule="zb-h1")
    with pytest.raises(Exception, match="zb-h1"):
        chrome_trace(r)


def test_cli_writes_the_trace_and_never_over_an_input(cli, tmp_path):
    out = tmp_path / "step.json"
    r = cli("step", "llama-3-70b", "--gpus", "64", "--tp", "8", "--pp", "2", "--global-batch", "128", "--trace", out)
    assert r.code == 0, r.err
    d = json.loads(out.read_text())
    assert d["otherData"]["step_time_s"] > 0 and d["displayTimeUnit"] == "ms"
    assert_one_line_error(cli("step", "llama-3-70b", "--trace", tmp_path / "missing" / "x.json"), "no folder")
