"""Stack specs (specs/stack.py, stacks/*.yaml): loading, extends, per-generation values, overrides,
the listing commands, and bad stack files as one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmpar.parallel import Settings
from llmpar.specs import load_hardware, load_stack
from llmpar.specs.stack import per_gen

ROOT = Path(__file__).resolve().parents[1]

SHIPPED = ("megatron-core", "megatron-2022", "megatron-deepspeed-2021", "nanotron", "torchtitan", "torchtitan-compile",
           "deepspeed", "hai-llm")


def test_every_shipped_stack_loads_names_its_sources_and_zero_stages():
    for name in SHIPPED:
        st = load_stack(name)
        assert st.name == name and st.sources, name
        assert set(st.zero_stages) <= {0, 1, 2, 3} and st.zero_stages, name


def test_per_generation_values_resolve_by_the_hardware_generation():
    # megatron-core's GEMM fraction: ampere 0.8586 (megatron-2022's A100 fit: scripts/fit_stacks.py
    # megatron-2022), hopper 0.7452 (33 H100 rows: fit_stacks.py megatron-core), blackwell 0.8353 (8
    # dense B200/GB200 rows: fit_stacks.py megatron-core-blackwell), default 0.85 (the prior); the
    # values are the YAML's, stated here so a refit shows up as a changed test
    st = load_stack("megatron-core")
    assert per_gen(st.kernels.gemm_efficiency, load_hardware("a100-80gb").gpu.generation) == 0.8586
    assert per_gen(st.kernels.gemm_efficiency, load_hardware("h100-sxm").gpu.generation) == 0.7452
    assert per_gen(st.kernels.gemm_efficiency, load_hardware("gb200-nvl72").gpu.generation) == 0.8353
    assert per_gen(st.kernels.gemm_efficiency, None) == 0.85
    assert per_gen(0.5, "hopper") == 0.5


def test_extends_merges_and_explicit_options_override(tmp_path):
    # a user stack that extends megatron-core and changes one overlap keeps every other value;
    # an explicit --tp-overlap overrides the stack and Settings says which values were given
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: mine\nextends: megatron-core\noverlap:\n  tp: 0.25\n")
    st = load_stack(str(mine))
    base = load_stack("megatron-core")
    assert st.overlap.tp == 0.25 and st.overlap.dp == base.overlap.dp
    assert st.kernels.gemm_efficiency == base.kernels.gemm_efficiency and st.extends == "megatron-core"
    s = Settings(stack=st)
    assert s.tp_overlap == 0.25 and s.overrides() == {}
    s = Settings(stack=st, tp_overlap=0.5)
    assert s.tp_overlap == 0.5 and s.overrides() == {"tp_overlap": 0.5}
    # the grad dtype follows the stack: fp32 main grads (megatron-core) vs bf16 (deepspeed)
    assert Settings().grad_dtype == "fp32" and Settings(stack="deepspeed").grad_dtype == "bf16"


@pytest.mark.parametrize("body, needle", [
    ("name: bad\nextends: megatron-core\nkernels:\n  gemm_eficiency: 0.5\n", "kernels.gemm_eficiency"),
    ("name: bad\nkernels:\n  gemm_efficiency: {turing: 0.5, default: 0.7}\n", "unknown GPU generation"),
    ("name: bad\nkernels:\n  gemm_efficiency: {hopper: 0.5}\n", "'default' entry"),
    ("name: bad\noverlap:\n  tp: 1.5\n", "overlap.tp"),
    ("name: bad\noverlap:\n  tp_generations: [pascal]\n", "overlap.tp_generations"),
    ("name: bad\nextends: no-such-stack\n", "unknown stack 'no-such-stack'"),
    ("name: bad\nzero_stages: [0, 4]\n", "zero_stages"),
    # a per-generation time names the field, not pydantic's union branch
    ("name: bad\nkernels:\n  moe_s_per_layer: {default: 0, blackwell: -1 ms}\n", "field 'kernels.moe_s_per_layer'"),
    ("name: bad\nmemory:\n  selective_recompute: op\n", "memory.selective_recompute"),
    ("name: bad\nschedules: [1f1b, pipedream]\n", "schedules"),
    ("name: bad\nschedules: []\n", "schedules"),
])
def test_a_bad_stack_file_is_one_line_exit_2(cli, tmp_path, body, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text(body)
    for cmd in (("memory", "llama-3-8b"), ("step", "llama-3-8b"), ("plan", "llama-3-8b", "--gpus", "8")):
        res = cli(*cmd, "--stack", str(bad))
        assert res.code == 2, (cmd, res.err)
        assert needle in res.err and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1


def test_stacks_commands(cli):
    res = cli("stacks", "--json")
    assert res.code == 0
    assert {r["name"] for r in res.json()} == set(SHIPPED)
    res = cli("stacks", "show", "mcore", "--json")      # an alias of megatron-core
    assert res.code == 0 and res.json()["name"] == "megatron-core"
    assert res.json()["profile"]["overlap"]["tp"] == load_stack("megatron-core").overlap.tp
    res = cli("stacks", "show", "nope")
    assert res.code == 2 and "unknown stack 'nope'" in res.err


def test_step_json_and_header_name_the_stack(cli):
    res = cli("step", "llama-3-8b", "--stack", "nanotron", "--json")
    assert res.code == 0 and res.json()["settings"]["stack"] == "nanotron"
    res = cli("step", "llama-3-8b", "--stack", "nanotron")
    assert "stack nanotron" in res.out.splitlines()[0]


def test_moe_layer_cost_per_micro_batch_by_hand():
    """kernels.moe_s_per_layer: seconds per MoE layer and micro-batch, 1/3 in the forward and 2/3
    in the backward like the launch cost (cost/step.py _layer_compute), per GPU generation.
    Mixtral-8x7B (32 layers, all MoE) on one B200 (blackwell), pp = 1, m = 4 micro-batches:
    5 ms adds 4 x 32 x 5 ms = 0.64 s to the step; with full recompute the forward re-runs and
    adds its third again: 0.64 x 4/3 = 0.8533 s. A Hopper GPU reads the default, 0."""
    from llmpar.cost.step import step_time
    from llmpar.parallel import Parallel
    from llmpar.specs import load_model

    model = load_model("mixtral-8x7b")
    assert model.moe_layers == 32 == model.layers
    base = load_stack("megatron-core")
    data = base.model_dump()
    data["kernels"]["moe_s_per_layer"] = {"default": 0.0, "blackwell": 0.005}
    priced = type(base).model_validate(data)
    data["kernels"]["moe_s_per_layer"] = 0.0
    free = type(base).model_validate(data)

    def t(stack, hw, rec):
        par = Parallel(micro_batch=1, microbatches=4, seq=4096, recompute=rec)
        return step_time(model, load_hardware(hw), par, Settings(stack=stack), with_memory=False)["step_time_s"]

    assert t(priced, "b200", 0) - t(free, "b200", 0) == pytest.approx(4 * 32 * 0.005, rel=1e-9)
    assert t(priced, "b200", 2) - t(free, "b200", 2) == pytest.approx(4 * 32 * 0.005 * 4 / 3, rel=1e-9)
    assert t(priced, "h100-sxm", 0) == t(free, "h100-sxm", 0)
    # megatron-core prices its MoE launch work per local expert instead (test below): 0 here
    assert per_gen(base.kernels.moe_s_per_layer, "blackwell") == 0.0
    assert per_gen(base.kernels.moe_s_per_layer, "hopper") == 0.0


def test_moe_cost_per_local_expert_by_hand():
    """kernels.moe_s_per_local_expert: seconds per routed expert held on the GPU (experts / ep),
    per MoE layer and micro-batch (TE GroupedLinear launches a GEMM per local expert).
    Mixtral-8x7B (32 MoE layers, 8 experts), m = 4, c = 0.5 ms on B200:
      one GPU, ep = 1: 8 local experts -> 4 x 32 x 8 x 0.5 ms = 0.512 s;
      two GPUs, dp = ep = 2: 4 local experts each -> 4 x 32 x 4 x 0.5 ms = 0.256 s."""
    from llmpar.cost.step import step_time
    from llmpar.parallel import Parallel
    from llmpar.specs import load_model

    model = load_model("mixtral-8x7b")
    assert model.moe.experts == 8 and model.moe_layers == 32
    base = load_stack("megatron-core")
    data = base.model_dump()
    data["kernels"]["moe_s_per_layer"] = 0.0
    data["kernels"]["moe_s_per_local_expert"] = {"default": 0.0, "blackwell": 0.0005}
    priced = type(base).model_validate(data)
    data["kernels"]["moe_s_per_local_expert"] = 0.0
    free = type(base).model_validate(data)

    def t(stack, dp, ep):
        par = Parallel(dp=dp, ep=ep, micro_batch=1, microbatches=4, seq=4096)
        return step_time(model, load_hardware("b200"), par, Settings(stack=stack), with_memory=False)["step_time_s"]

    assert t(priced, 1, 1) - t(free, 1, 1) == pytest.approx(4 * 32 * 8 * 0.0005, rel=1e-9)
    assert t(priced, 2, 2) - t(free, 2, 2) == pytest.approx(4 * 32 * 4 * 0.0005, rel=1e-9)
    # the shipped value: fitted on NeMo 25.11's Blackwell MoE rows (stacks/megatron-core.yaml,
    # scripts/fit_stacks.py megatron-core-blackwell-moe). It is host launch work, so every other
    # generation carries it unfitted (Hopper's two MoE rows, validation/nemo-2511-h100.yaml, stay
    # out of sample); hai-llm (DeepGEMM, no per-expert launches) sets 0 everywhere
    assert per_gen(base.kernels.moe_s_per_local_expert, "blackwell") == 0.0003676
    assert per_gen(base.kernels.moe_s_per_local_expert, "hopper") == 0.0003676
    assert per_gen(base.kernels.moe_s_per_local_expert, "ampere") == 0.0003676
    hai = load_stack("hai-llm")
    assert per_gen(hai.kernels.moe_s_per_local_expert, "hopper") == 0.0
    assert per_gen(hai.kernels.moe_s_per_local_expert, "blackwell") == 0.0


def test_megatron_deepspeed_2021_is_megatron_2022_with_zero3():
    # Narayanan 2021 Table 2 ran ZeRO-3 on the same GPT model code: the kernels are megatron-2022's
    # (its fitted GEMM fraction carries over); the ZeRO engine's bandwidth share and prefetch are fitted
    st, base = load_stack("megatron-deepspeed-2021"), load_stack("megatron-2022")
    assert st.kernels == base.kernels and st.zero_stages == [0, 1, 2, 3] and base.zero_stages == [0]
    # the calibration record lists exactly the two fitted values, and they are the ones the stack runs with
    assert st.calibration["parameters"] == {"network.scale_out_efficiency": st.network.scale_out_efficiency,
                                            "overlap.zero3_prefetch": st.overlap.zero3_prefetch}
    assert (st.network.scale_out_efficiency, st.overlap.zero3_prefetch) != (base.network.scale_out_efficiency,
                                                                            base.overlap.zero3_prefetch)


def test_the_zero3_rows_are_comm_bound_by_hand():
    # Narayanan eq. 3 for GPT-3 175B (l 96, h 12288, s 2048, V 51200) at batch 1536:
    # F = 96·B·s·l·h²·(1 + s/6h + V/16lh) = 4.5110e18 FLOPs per step. Step = F / (TFLOP/s x GPUs):
    # 768 GPUs at 88 and 1536 GPUs at 44 give the same 66.75 s (88 x 768 = 44 x 1536), while the
    # compute per GPU halves: the step is the ZeRO-3 traffic, which does not shrink with more GPUs.
    import yaml

    rows = {r["gpus"]: r for r in yaml.safe_load((ROOT / "validation" / "narayanan2021-table2-zero3.yaml").read_text())["runs"]
            if r["model"] == "megatron-gpt-175b"}
    F = 96 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288))
    assert F == pytest.approx(4.5110e18, rel=1e-4)
    step = {n: F / (r["tflops_per_gpu"] * 1e12 * n) for n, r in rows.items()}
    assert step[768] == pytest.approx(step[1536], rel=1e-12) == pytest.approx(66.75, abs=0.01)
    assert step[384] == pytest.approx(81.58, abs=0.01)


def test_a_calibration_record_is_the_files_own_not_merged_with_its_base():
    # torchtitan-compile extends torchtitan; each file records its own fit. The child's record must
    # not also list the base's fitted element-wise factor (it runs at 1.0, Inductor-fused), as a
    # key-by-key merge of the two records did
    comp, base = load_stack("torchtitan-compile"), load_stack("torchtitan")
    assert "kernels.elementwise_traffic" in base.calibration["parameters"]
    assert "kernels.elementwise_traffic" not in comp.calibration["parameters"]
    assert comp.kernels.elementwise_traffic == 1.0


def test_stacks_show_prints_what_the_framework_implements_and_its_network(cli):
    # zero_stages, schedules and the network section are stack values like the others: a user must
    # see megatron-deepspeed-2021's fitted scale-out share (0.1522) and nanotron's schedules
    res = cli("stacks", "show", "megatron-deepspeed-2021")
    assert res.code == 0, res.err
    assert "network.scale_out_efficiency" in res.out
    assert f"{load_stack('megatron-deepspeed-2021').network.scale_out_efficiency:g}" in res.out
    assert "0, 1, 2, 3" in res.out
    res = cli("stacks", "show", "nanotron")
    assert "gpipe, 1f1b" in res.out


def test_moe_step_on_a_generation_without_moe_cost_says_it_is_optimistic(cli):
    # torchtitan states no MoE launch cost (its MoE path is not measured in validation/), so step
    # and plan say the MoE step is likely optimistic. megatron-core prices it on every generation
    # (moe_s_per_local_expert, fitted on NeMo 25.11's Blackwell rows, carried as host work), and
    # a dense model gets no such line.
    note = "states no MoE launch cost for hopper"
    moe_tt = cli("step", "mixtral-8x7b", "--gpus", "8", "--ep", "8", "--stack", "torchtitan", "--json").json()
    assert any(note in a for a in moe_tt["assumptions"])
    for hw in ("h100-sxm", "b200"):
        moe_mc = cli("step", "mixtral-8x7b", "--hardware", hw, "--gpus", "8", "--ep", "8", "--json").json()
        assert not any("states no MoE launch cost" in a for a in moe_mc["assumptions"])
    dense = cli("step", "llama-3-8b", "--gpus", "8", "--stack", "torchtitan", "--json").json()["assumptions"]
    assert not any("MoE launch cost" in a for a in dense)
    plan = cli("plan", "mixtral-8x7b", "--gpus", "32", "--stack", "torchtitan", "--json").json()
    assert any(note in a for a in plan["assumptions"])


def test_a_stage_or_schedule_the_framework_lacks_is_named(cli):
    # nanotron implements ZeRO 0 and 1 (stacks/nanotron.yaml zero_stages), megatron-core the 1f1b and
    # interleaved schedules: a layout outside them is still priced (llmpar's generic ZeRO-3 and ZB-H1
    # rules) but says so, once; inside them nothing is added
    def notes(*args):
        res = cli("step", *args, "--json")
        assert res.code == 0, res.err
        return [a for a in res.json()["assumptions"] if "does not implement" in a]

    assert notes("llama-3-8b", "--gpus", "8", "--zero", "3", "--stack", "nanotron") == [
        "stack nanotron does not implement ZeRO-3 (it implements 0, 1): priced with llmpar's generic rules for it, "
        "not this framework's (`llmpar stacks show nanotron`)"]
    (zb,) = notes("llama-3-70b", "--gpus", "64", "--pp", "4", "--schedule", "zb-h1")
    assert "the zb-h1 schedule (it implements 1f1b, interleaved)" in zb
    assert notes("llama-3-8b", "--gpus", "8", "--zero", "1", "--stack", "nanotron") == []


def test_plan_names_a_fixed_stage_the_framework_lacks(cli):
    # --fix zero=3 takes the planner outside nanotron's zero_stages: its #1 says so (the search itself
    # keeps to the stack's stages unless told otherwise, so the default plan has no such line)
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--stack", "nanotron", "--fix", "zero=3", "--top", "1", "--json")
    assert res.code == 0, res.err
    assert any(a.startswith("plan #1: stack nanotron does not implement ZeRO-3") for a in res.json()["assumptions"])
    res = cli("plan", "llama-3-8b", "--gpus", "8", "--stack", "nanotron", "--top", "1", "--json")
    assert not any("does not implement" in a for a in res.json()["assumptions"])


def test_megatron_cores_tp_overlap_holds_on_the_generations_it_was_fitted_on():
    # docs/stacks.md, TP overlap by GPU generation: TE userbuffers' fast path needs CUDA multicast
    # (cc 9.0+); no published A100 run measures it, so on ampere the stack hides no TP traffic
    from llmpar.parallel import Settings

    s = Settings(stack="megatron-core")
    assert s.tp_overlap == 0.7357
    assert (s.tp_overlap_on("hopper"), s.tp_overlap_on("blackwell"), s.tp_overlap_on(None)) == (0.7357,) * 3
    assert s.tp_overlap_on("ampere") == 0.0 and s.tp_overlap_on("volta") == 0.0
    # --tp-overlap is a claim of the user's own: it holds on any generation
    assert Settings(stack="megatron-core", tp_overlap=0.5).tp_overlap_on("ampere") == 0.5
    # a stack that states no generations (every other shipped stack) applies its value everywhere
    assert Settings(stack="torchtitan").stack.overlap.tp_generations is None


def test_on_an_a100_the_tp_collectives_are_exposed_as_with_no_overlap():
    from llmpar import api

    kw = dict(hardware="a100-80gb", gpus=64, tp=8, pp=1, micro_batch=1, global_batch=64, seq=2048)
    default = api.step("llama-3-8b", **kw).breakdown_s["tp"]
    assert default == api.step("llama-3-8b", tp_overlap=0, **kw).breakdown_s["tp"] > 0
    hidden = api.step("llama-3-8b", tp_overlap=0.7357, **kw).breakdown_s["tp"]
    # claimed, f = 0.7357 of the collectives hides behind the GEMMs that feed them (cost/step_stage.py
    # layer_comm): forward tp_f - f*min(tp_f, g), backward tp_b - f*min(tp_b, 2g), g the layer's
    # forward linear GEMM time. Here tp_f = tp_b = 0.556 ms and g = 0.521 ms per layer and
    # micro-batch: the forward hides f*g (its all-reduce outlasts its GEMMs), the backward f*tp_b,
    # so hidden/default = (tp_f - f*g + (1 - f)*tp_b) / (tp_f + tp_b) = 0.2874
    parts = api.step("llama-3-8b", **kw).detail["parts"]
    tf, tb, g, f = parts["tp_forward_s"], parts["tp_backward_s"], parts["linear_forward_s"], 0.7357
    assert tf > g and tb < 2 * g      # the two regimes the derivation takes
    assert hidden / default == pytest.approx((tf - f * g + (1 - f) * tb) / (tf + tb), rel=1e-9)
    assert hidden / default == pytest.approx(0.2874, abs=5e-4)


def test_a_tp_overlap_fitted_on_a_generation_applies_on_it():
    # calibrate runs fits overlap.tp on the runs' generation: what it measured holds there
    # (calibrate/runs_parameters.stack_with), and the generations the stack had stay
    from llmpar.calibrate.runs_parameters import stack_with
    from llmpar.specs.registry import load_stack

    base = load_stack("megatron-core")
    fitted = stack_with(base, {"overlap.tp": 0.4}, "ampere")
    assert (fitted.overlap.tp, fitted.overlap.tp_generations) == (0.4, ["hopper", "blackwell", "ampere"])
    assert stack_with(base, {"overlap.tp": 0.4}, "hopper").overlap.tp_generations == ["hopper", "blackwell"]
    assert stack_with(base, {"overlap.dp": 0.4}, "ampere").overlap.tp_generations == ["hopper", "blackwell"]


def test_the_stack_note_says_where_the_tp_overlap_holds(tmp_path):
    # on a GPU generation the stack's overlap.tp was not measured on, the note says the 0 it used
    # and why, for the shipped list and for an empty one (no generation at all)
    from llmpar import api

    notes = " | ".join(api.step("llama-3-8b", hardware="a100-80gb", tp=8).assumptions)
    assert "tp overlap 0 (its 0.7357 is measured on hopper, blackwell only: none on ampere" in notes
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nextends: megatron-core\noverlap:\n  tp_generations: []\n")
    notes = " | ".join(api.step("llama-3-8b", tp=8, stack=str(f)).assumptions)
    assert "tp overlap 0 (its 0.7357 is measured on no GPU generation: none on hopper" in notes
    # on a generation it was measured on, the value and no caveat
    notes = " | ".join(api.step("llama-3-8b", tp=8).assumptions)
    assert "tp overlap 0.7357, dp overlap" in notes
