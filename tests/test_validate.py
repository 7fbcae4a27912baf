"""validation/: the shipped A100 rows are wired correctly (layouts, searched knobs). The command
itself: tests/test_validate_cmd.py."""

from llmpar.calibrate.runs_layouts import as_run, layout_candidates
from llmpar.calibrate.runs_io import read_runs
from llmpar.specs import load_model
from llmpar.specs.registry import data_dir


def _runs(name):
    return [as_run(r) for r in read_runs([data_dir("validation") / f"{name}.yaml"]).runs]


def test_rows_are_consistent_layouts():
    # every published layout divides its GPU count, and dp = GPUs / (tp * pp)
    # (Narayanan Table 1's "derived data parallel" column: 32, ..., 24, 15, 9, 6)
    assert [r.layout["dp"] for r in _runs("narayanan2021-table1")] == [32, 32, 32, 32, 32, 32, 24, 15, 9, 6]
    assert all(r.layout["dp"] == 1 for r in _runs("korthikanti2022-table5"))   # Table 3: no data parallelism


def test_candidates_respect_megatron_rules():
    # 145.6B: 80 layers / pp 8 = 10 per stage -> chunks v in {2, 5, 10} (the row says interleaved);
    # B = 2304, dp = 24: b must divide 96 sequences per pipeline, and m = 96/b a multiple of p = 8
    # (the shipped row gives both, from examples/sc21/run_table_1.sh; drop them to search)
    row = _runs("narayanan2021-table1")[6]
    published = layout_candidates(row, load_model("megatron-gpt-145.6b"), zero_stages=(0,))
    # --micro-batch-size 2, --num-layers-per-virtual-pipeline-stage 5: 10 / 5 = 2 chunks
    assert {(c["micro_batch"], c["virtual_stages"]) for c in published} == {(2, 2)}
    del row.layout["micro_batch"], row.layout["virtual_stages"]
    cands = layout_candidates(row, load_model("megatron-gpt-145.6b"), zero_stages=(0,))
    pairs = {(c["micro_batch"], c["virtual_stages"]) for c in cands}
    for b, v in pairs:
        assert 96 % b == 0 and 10 % v == 0 and v >= 2 and (96 // b) % 8 == 0
    assert {(1, 10), (4, 2)} <= pairs and (8, 2) not in pairs     # 96/8 = 12 is not a multiple of 8


def test_unpublished_knobs_are_searched():
    # Narayanan 2021 Table 2 prints the PTD-P micro-batch (1) but not the chunks per stage of its
    # interleaved schedule: validate searches those (and says so with a '*'); megatron-2022 has
    # ZeRO 0 only and every row states its recompute, so nothing else is searched
    from llmpar.specs import load_stack
    from llmpar.validation.core import _searched

    stack = load_stack("megatron-2022")
    assert {tuple(_searched(r, stack)) for r in _runs("narayanan2021-table2-ptdp")} == {("virtual_stages",)}
    assert {tuple(_searched(r, stack)) for r in _runs("narayanan2021-table1")} == {()}
