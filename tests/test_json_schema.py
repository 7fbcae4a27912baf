"""The JSON contract: every command's ``--json`` keys, pinned (issue 9; docs/json.md documents them).

JSON is the contract for scripts (docs/architecture.md, "Rendering is last"): keys stay stable, snake_case,
with the unit in the name. This test runs each command in-process (the ``cli`` fixture) and
compares the set of key *paths* of its output with the list below: ``a.b`` is key ``b`` of the
object under ``a``; ``a[]`` an element of list ``a`` (``a[].b`` a key of its objects); ``a.*`` an
object whose keys are data (a tier name, a model name, a YAML profile) and are not pinned.

A failure here means a key was added, renamed or dropped. If that was meant, update the list
*and* docs/json.md in the same commit, and say so in the changelog: scripts read these keys.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml
from _synthetic_nccl import SWEEP, TRUTH_YAML, write_log

from llmpar.cost.collectives import collective_time
from llmpar.specs import load_hardware

# ----------------------------------------------------------------------------- shared blocks

PARALLEL = tuple(f"parallel.{k}" for k in (
    "tp", "pp", "dp", "cp", "ep", "etp", "zero", "sp", "recompute", "micro_batch", "global_batch", "microbatches", "seq",
    "schedule", "virtual_stages", "recompute_layers", "offload_layers"))
SETTINGS = tuple(f"settings.{k}" for k in (
    "dtype", "optimizer", "grad_dtype", "convention", "attention", "kv_dtype", "dp_overlap", "tp_overlap",
    "ep_overlap", "ep_dispatcher", "recompute_modules", "rank_order", "stack", "finetune", "lora_rank",
    "lora_targets", "optimizer_offload", "param_offload"))
MEMORY_COMPONENTS = tuple(f"memory.{k}" for k in (
    "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "buffers_bytes", "kv_cache_bytes",
    "allocated_bytes", "allocator_overhead_bytes", "reserved_bytes", "runtime_bytes", "total_bytes", "margin_bytes"))
COMMON = ("model", "hardware", "gpus") + PARALLEL      # docs/architecture.md: every layout result carries these
# how far off a figure may be (llmpar.evidence; docs/json.md, Intervals)
EVIDENCE = tuple(f"evidence.{k}" for k in ("class", "used_class", "rows", "sources", "extrapolated"))
SPEED_INTERVAL = tuple(f"interval.{k}" for k in ("level", "step_time_s[]", "tokens_per_s[]", "mfu[]", *EVIDENCE))
MEMORY_INTERVAL = ("level", "total_bytes[]", "may_not_fit", *EVIDENCE)
PLAUSIBILITY = tuple(f"plausibility.{k}" for k in ("best_published_mfu", "best_source", "class", "rows",
                                                    "class_factor", "above_published", "step_time_at_best_s"))

MEMORY = COMMON + SETTINGS + MEMORY_COMPONENTS + (
    "model_requested", "mode", "params_total", "params_per_gpu",
    "bytes_per_param.weights", "bytes_per_param.gradients", "bytes_per_param.optimizer",
    "bytes_per_param.fp8_weight_cache", "bytes_per_param.convention", "bytes_per_param.gradients_fp32_accumulated",
    "model_states_bytes", "activation_bytes_per_layer", "capacity_bytes", "usable_bytes", "fits", "verdict",
    "margin_bytes", "uncertainty", "communicators", "max_micro_batch", "most_loaded_stage", "assumptions[]")
TRAINING_MEMORY = MEMORY + tuple(f"interval.{k}" for k in MEMORY_INTERVAL) + tuple(
    f"changes_that_fit[].{k}" for k in ("change", "total_bytes", "fits", "step_time_s", "step_time_ratio"))

STEP_FIGURES = COMMON + SETTINGS + (
    "tokens_per_step", "step_time_s", "tokens_per_s", "samples_per_s", "model_tflops_per_gpu",
    "hardware_tflops_per_gpu", "mfu", "hfu", "mfu_full_attention", "mfu_convention", "fits",
    *(f"breakdown_s.{k}" for k in ("compute", "recompute", "tp", "pp", "dp", "cp", "ep", "offload", "bubble", "optimizer",
                                   "fixed")),
    *(f"comm_bytes_per_gpu.{k}" for k in ("tp", "pp", "dp", "cp", "ep")),
    *MEMORY_COMPONENTS, "memory.capacity_bytes", "memory.fits", "memory.max_micro_batch", "memory.params_per_gpu",
    *SPEED_INTERVAL, *PLAUSIBILITY)

STEP_PARTS = tuple(f"detail.parts.{k}" for k in (
    "gemm_forward_s", "linear_forward_s", "attention_core_forward_s", "attention_core_backward_s",
    "fp8_cast_forward_s", "fp8_cast_backward_s", "launch_s", "fixed_s", "elementwise_forward_s",
    "elementwise_forward_bytes", "layer_forward_s", "layer_backward_s", "layer_recompute_s", "tp_forward_s",
    "tp_backward_s", "cp_exposed_s", "ep_exposed_s", "offload_exposed_s", "offload_bytes_per_microbatch",
    "head_forward_s", "head_backward_s", "embedding_s", "mtp_forward_s", "mtp_backward_s",
    "bf16_layers_extra_s", "p2p_per_transfer_s", "has_head", "has_embedding", "dp_total_s", "optimizer_params",
    "microbatches", "param_offload_s"))

VARIANT = ("schedule", "virtual_stages", "step_time_s", "memory_bytes")
# a plan row lists the layouts that tie with it exactly (issue 9 item 9): their `parallel` objects
PLAN_ROW = ("rank", *STEP_FIGURES, "memory.stage", "memory.verdict", "memory.host_bytes", "equivalent[]",
            *(f"equivalent[].{k}" for k in ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "sp", "recompute", "micro_batch",
                                            "global_batch", "microbatches", "seq", "schedule", "virtual_stages",
                                            "recompute_layers", "offload_layers")),
            # the same layout at other interleaving depths, folded into the row (planner/families.py)
            "variants[]", *(f"variants[].{k}" for k in VARIANT))
ERRORS = tuple(f"{s}_abs_error_ge_{n}" for s in ("median", "max") for n in ("1MB", "64MB"))
BUBBLE = ("schedule", "pp", "microbatches", "virtual_stages", "bubble_over_ideal", "bubble_fraction_of_step",
          "formula_bubble_over_ideal", "formula_bubble_fraction_of_step", "source", "in_flight_microbatches",
          "parameter_copies", "unit_chunk_times.forward", "unit_chunk_times.backward_input",
          "unit_chunk_times.backward_weight", "notes[]", "drawn_idle_fraction")
TIMES = ("time_us", "algbw_GBps", "busbw_GBps", "wrong", "max_error", "cputime", "per_iter")


def under(prefix: str, keys) -> tuple[str, ...]:
    return tuple(f"{prefix}{k}" for k in keys)


CV_FIGURES = ("median_abs_error", "mean_abs_error", "signed_median_error", "optimistic_share", "interval_coverage")
CV_BLOCK = ("rows", "sources", *CV_FIGURES, *under("rows_pooled.", CV_FIGURES),
            *under("rows_by_scheme.", ("source", "configurations", "none")), "per_stack.*", "per_source.*")


SCHEMA: dict[str, tuple[str, ...]] = {
    "memory": TRAINING_MEMORY,
    "memory --per-stage --explain": TRAINING_MEMORY + under("stages[].", (
        "stage", "layers", "params_per_gpu", "weights_bytes", "gradients_bytes", "optimizer_bytes",
        "activations_bytes", "buffers_bytes", "in_flight", "allocated_bytes", "reserved_bytes", "runtime_bytes",
        "total_bytes")) + under("terms[].", ("component", "name", "bytes", "formula", "values", "source")),
    "memory --inference": tuple(k for k in MEMORY if k not in (
        "bytes_per_param.convention", "bytes_per_param.gradients_fp32_accumulated")) + (
        "inference.batch", "inference.context", "inference.kv_dtype"),
    "memory --params": MEMORY,
    "step": STEP_FIGURES + STEP_PARTS + ("model_requested", "assumptions[]")
    + under("terms[].", ("component", "name", "seconds", "formula", "values", "source", "counted"))
    + tuple(f"memory.interval.{k}" for k in MEMORY_INTERVAL) + under("detail.", (
        "stage_forward_s", "stage_backward_s", "critical_stage_layers", "model_flops_per_step",
        "hardware_flops_per_step", "peak_flops", "generation", "attention_efficiency[]",
        "gemm_max_efficiency")),
    "plan": (
        "model", "model_requested", "hardware", "gpus", "seq", "global_batch", "tokens_per_step", "objective",
        *SETTINGS, *under("plans[].", PLAN_ROW), *under("pareto[].", PLAN_ROW[:PLAN_ROW.index("equivalent[]") + 1]), "pareto[].variants[]",
        *(f"pareto[].variants[].{k}" for k in VARIANT),
        *under("space.", ("candidates", "feasible", "memory_evaluated", "step_evaluated", "search_s", "tight",
                          "margin", "recommended", "within_error", "robust_band", "rank_tolerance")),
        *under("space.rejected.", ("tp_heads", "pp_layers", "cp_seq", "ep", "etp", "batch", "sp_seq", "sp_tp", "schedule",
                                   "convention", "stack", "finetune", "optimizer_offload", "param_offload", "memory",
                                   "host_memory")),
        "elapsed_s", "defaults_used[]", "assumptions[]",
        *under("comparison.", ("winner_rank", "other_rank", "objective", "margin_s")),
        *under("comparison.terms[].", ("term", "winner_s", "other_s", "difference_s")),
        *under("comparison.layout_differences[].", ("key", "winner", "other"))),
    "collective": (
        "collective", "size_bytes", "gpus", "hardware", "members_per_node", "nodes", "bus_factor", "chosen",
        "chosen_protocol", "time_s", "assumptions[]", "crosses_nodes", "tiers[]", *under("algorithms[].", (
            "algorithm", "protocol", "time_s", "bytes_per_rank", "algbw_GBps", "busbw_GBps", "tiers[]", "available",
            "nccl_choice", "latency_s", "bandwidth_s", "unavailable_because"))),
    "bubble": BUBBLE,
    "bubble --layers": BUBBLE + under("stages.", (
        "layers", "most_loaded_stage_layers", "first_stage_layers", "last_stage_layers")),
    "models": under("[].", ("name", "aliases[]", "family", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
                            "vocab", "max_seq", "moe", "experts", "top_k", "mla", "params_total", "params_active")),
    "models show": (
        "model", "alias_typed",
        *under("spec.", ("name", "aliases[]", "description", "source", "checkpoint", "family", "layers", "hidden", "heads",
                         "kv_heads", "head_dim", "ffn_hidden", "ffn_type", "vocab", "tied_embeddings", "norm",
                         "position", "max_seq", "linear_bias", "qkv_bias", "attention_out_bias", "mlp_bias",
                         "dropout", "attention", "parallel_block", "sandwich_norms", "sliding_window", "sliding_window_share",
                         "mtp_layers", "attention_sinks", "moe", "mla")),
        *under("derived.", ("kv_heads", "head_dim", "moe_layers", "dense_layers")),
        *under("params_per_layer.", ("attention", "dense_mlp", "expert", "shared_experts", "router", "norms",
                                     "dense_layer", "moe_layer")),
        *under("params.", ("embedding", "attention", "mlp", "experts", "shared_experts", "router", "norms", "head",
                           "total", "active"))),
    "hardware": under("[].", (
        "name", "aliases[]", "description", "extends", "gpu", "gpus_per_node", "job_domain", "memory_bytes",
        "memory_bandwidth_GBps", "memory_efficiency", "peak_tflops.*", "reserve_bytes", "generation", "board_power_w", "sms",
        "host_bandwidth_GBps", "host_memory_bandwidth_GBps", "host_memory_per_gpu_bytes", "gpus_per_host_link",
        "node_power_w", *under("gemm.", ("max_efficiency", "half_dim", "half_flops")),
        "gpu_hour_price", *under("tiers[].", (
            "name", "kind", "bandwidth_per_direction_GBps", "latency_s", "ll128_latency_s", "simple_latency_s",
            "efficiency", "domain_size", "in_network_reduction", "inr_latency_s", "inr_efficiency")))),
    "stacks": under("[].", ("name", "aliases[]", "description", "extends", "fitted", "attention_kernel",
                            "activations", "main_grad_fp32", "tp_overlap", "dp_overlap")),
    "stacks show": ("name", "aliases[]", "description", "extends", "fitted", "attention_kernel", "activations",
                    "main_grad_fp32", "tp_overlap", "dp_overlap", "profile.*"),
    "calibrate parse": under("files[].", (
        "file", "section", "collective", "ranks", "nodes", "gpus_per_node", "gpu", "hosts[]", "format", "library",
        "avg_busbw_GBps", "flagged_rows", "inferred.*", "notes[]",
        *under("rows[].", ("size_bytes", "count", "type", "redop", "root", "flagged", "line", "timestamp", "problem",
                           *under("out_of_place.", TIMES), *under("in_place.", TIMES))))),
    "calibrate fit": (
        "base", "hardware", "primary_collective", "date", "out", "profile.*",
        *under("fits[].", ("collective", "tiers[]", "alongside[]", "files[]", "before.*", "after.*",
                           "rms_rel_error", "max_rel_error", "samples", "notes[]")),
        *under("files[].", ("file", "sha256", "collective", "ranks", "nodes", "members_per_node", "domains", "tier",
                            "rows", "notes[]", *under("before.", ERRORS), *under("after.", ERRORS)))),
    "calibrate check": (
        "hardware", "plot", *under("summary.", ERRORS),
        *under("rows[].", ("file", "collective", "size_bytes", "measured_time_s", "predicted_time_s",
                           "measured_busbw_GBps", "predicted_busbw_GBps", "error", "algorithm", "protocol")),
        *under("files[].", ("file", "collective", "ranks", "nodes", "members_per_node", "tier", "notes[]",
                            *under("summary.", ERRORS))),
        *under("check.", ("statistic", "tolerance", "value", "passed"))),
    "calibrate runs --check": (
        "stack", "generation", "parameters.*", "notes[]", "out", "held_out",
        *under("summary.before.", (
            "fits_agreement", *under("speed.", ("runs", "median_abs", "mean_abs", "max_abs")),
            *under("memory.", ("runs", "median_abs", "mean_abs", "max_abs")),
            *under("regret.", ("configurations", "median", "within_5pct", "per_configuration.*")))),
        *under("rows[].", ("source", "model", "status", "tokens_per_step", "measured_step_time_s",
                           "predicted_step_time_s_before",
                           "predicted_step_time_s_after", "measured_memory_bytes", "predicted_memory_bytes_before",
                           "predicted_memory_bytes_after", "predicted_fits_after", "predicted_step_time_s_interval[]",
                           *(f"interval_{k}" for k in EVIDENCE),
                           *under("layout.", ("gpus", "tp", "pp", "dp", "cp", "global_batch", "seq")),
                           *under("chosen.", ("micro_batch", "virtual_stages", "zero", "recompute", "microbatches", "schedule", "sp",
                                              "recompute_layers", "offload_layers"))))),
    "validate": (
        *under("rows[].", ("source", "row", "location", "stack", "status", "searched[]", "fits", "metric", "unit",
                           "published", "predicted", "error", "convention", "evidence_class[]", "measured_mfu",
                           "tokens_per_gpu_per_step", "cv_predicted", "cv_error", "cv_scheme", "cv_residual",
                           "cv_covered", "cv_interval.ratio[]",
                           *(f"cv_interval.{k}" for k in ("class", "used_class", "rows", "sources", "extrapolated")),
                           *under("config.", ("model", "hardware", "gpus", "tp", "pp", "dp", "cp", "ep", "etp", "zero",
                                              "recompute", "micro_batch", "global_batch", "microbatches", "seq",
                                              "virtual_stages", "schedule", "sp", "recompute_layers",
                                              "offload_layers", "dtype", "optimizer", "grad_dtype",
                                              "tp_overlap", "dp_overlap", "ep_overlap", "ep_dispatcher")))),
        *under("groups[].", ("source", "metric", "stack", "rows", "mean_abs_error", "max_abs_error",
                             "median_abs_error")),
        *under("cross_validation.", ("scheme", "level", "weighting", "error", "missing_sources[]", *CV_BLOCK,
                                     *under("memory.", ("error", *CV_BLOCK)))),
        *under("sources[].", ("name", "citation", "url", "about", "hardware", "metric", "convention",
                              "flops_convention", "file_stack", "stack", "stack_fitted_on[]", "stack_calibration.*",
                              "runs", "notes[]", "left_out"))),
}

# ----------------------------------------------------------------- sweep and serving (docs/json.md)

GOODPUT = ("assumptions[]", "checkpoint_bytes", "checkpoint_interval_s", "checkpoint_stall_s", "checkpoint_write_s",
           "effective_cost", "effective_cost_per_million_tokens", "effective_days", "effective_energy_mwh",
           "effective_gpu_hours", "failures_per_gpu_hour", "goodput", "lost_per_failure_s", "mode", "mtbf_s",
           "restart_s")
TRAINING = ("assumptions[]", "board_power_w", "cost", "cost_per_million_tokens", "days", "energy_mwh", "gpu_hour_price",
            "gpu_hours", "node_power_w", "power_basis", "power_per_gpu_w", "price_source", "pue", "steps", "tokens",
            "tokens_per_s", "train_time_s", *under("goodput.", GOODPUT))
SCHEMA["sweep"] = (
    "model", "model_requested", "hardware[]", "gpus[]", "seq", "global_batch", "tokens_per_step", "tokens", "deadline",
    "deadline.days", "deadline.by_hardware.*",
    "elapsed_s", "defaults_used[]", "assumptions[]", *SETTINGS,
    *under("rows[].", ("hardware", "gpus", "status", "reason", "days", "gpu_hours", "energy_mwh", "cost",
                       "scaling_efficiency", "scaling_reference_gpus",
                       *under("interval.", ("level", "step_time_s[]", "tokens_per_s[]", "mfu[]", "days[]",
                                            "gpu_hours[]", "energy_mwh[]", "cost[]", *EVIDENCE)),
                       *under("plan.", PLAN_ROW), *under("training.", TRAINING))))

BAND = ("level", "low", "high", "class", "used_class", "rows", "sources", "extrapolated")
PHASE = ("linear_s", "attention_s", "tp_s", "ep_s", "pp_s", "overhead_s", "total_s", "weight_bytes", "kv_read_bytes",
         "linear_flops", "attention_flops", "bandwidth_bytes_per_s", "peak_linear_flops_per_s")
SERVE = (
    "model", "hardware", "engine", "fits", "verdict", "ttft_s", "tpot_s", "itl_median_s", "e2e_s",
    "output_tokens_per_s", "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "requests_per_s",
    "max_concurrency", "notes[]",
    *under("settings.", ("hardware", "engine", "engine_version", "gpus", "tp", "pp", "ep", "replicas", "weights",
                         "kv_dtype", "isl", "osl", "max_num_seqs", "max_num_batched_tokens", "memory_fraction",
                         "spec_tokens", "acceptance", "prefix_hit", "dp_attention", "disagg", "interval_level")),
    *under("memory.", ("hbm_bytes", "weights_bytes", "activations_bytes", "workspace_bytes", "kv_pool_bytes",
                       "kv_bytes_per_token", "kv_tokens")),
    *under("breakdown.", ("decode_batch", "bandwidth_bound_s", "engine_per_step_s", *under("decode.", PHASE),
                          *under("prefill.", PHASE))),
    *under("terms[].", ("component", "name", "seconds", "formula", "values", "source", "counted")),
    *under("load.", ("kind", "running", "queue_s", "iteration_s", "prefill_iteration_s", "prefill_iterations")),
    *under("interval.ttft_s.", BAND), *under("interval.tpot_s.", BAND), *under("interval.itl_median_s.", BAND))
SCHEMA["serve"] = SERVE + ("load.concurrency", *under("interval.output_tokens_per_s.", BAND))
SCHEMA["serve --rate"] = SERVE + ("load.rate", "load.capacity_requests_per_s", "load.saturated",
                                  *under("interval.capacity_requests_per_s.", BAND))
SCHEMA["sweep --deadline"] = SCHEMA["sweep"]
SERVE_PLAN_ROW = ("engine", "weights", "kv_dtype", "tp", "pp", "ep", "replicas", "gpus", "max_num_batched_tokens",
                  "disagg", "dp_attention", "spec", "max_concurrency", "concurrency", "ttft_s", "tpot_s",
                  "output_tokens_per_s", "output_tokens_per_s_per_gpu", "requests_per_s", "cost_per_million_tokens",
                  "meets", "binding", "miss_ratio",
                  *(f"interval.{f}.{k}" for f in ("output_tokens_per_s", "ttft_s", "tpot_s") for k in BAND))
SCHEMA["serve-plan"] = (
    "model", "hardware", "engines[]", "engine_evidence.*", "isl", "osl", "ttft_s", "tpot_s", "gpus", "rate",
    "gpu_hour_price", "evaluated", "missed[]", "candidates[]", *under("candidates[].", SERVE_PLAN_ROW),
    *under("missed[].", SERVE_PLAN_ROW), "missed[].interval",
    *under("frontier[].", ("engine", "weights", "tp", "pp", "concurrency", "tokens_per_s_per_gpu",
                           "tokens_per_s_per_user", "ttft_s")))
SERVING_CV = ("figures", "sources", "median_abs_error", "signed_median", "optimistic_share", "interval_coverage",
              "level", "rows_pooled_median_abs_error", "rows_pooled_signed_median")
SCHEMA["validate --serving"] = (
    "serving.scheme", "serving.rows", "serving.sources", "serving.figures_by_scheme.*", "serving.per_source.*",
    *(f"serving.cross_validation.{f}.{k}" for f in ("throughput", "tpot", "ttft") for k in SERVING_CV))
ENGINE_ROW = ("name", "version", "description", "extends", "fitted", "gemm_efficiency", "memory_fraction", "memory_rule",
              "per_step_s", "decode_bandwidth.*", "max_num_batched_tokens.*", "max_num_seqs.*")
SCHEMA["engines"] = under("[].", ENGINE_ROW)
SCHEMA["engines show"] = ENGINE_ROW + ("profile.*",)
FT_FIGURES = ("rows", "sources", "median_abs_error", "signed_median", "max_abs_error", "source_median_abs_error",
              "per_source.*")
SCHEMA["validate --finetune"] = (
    *under("finetune.rows[].", ("source", "row", "model", "method", "kind", "metric", "unit", "published", "predicted",
                                "error")),
    *under("finetune.sources[].", ("name", "citation", "url", "stack", "runs", "left_out")),
    "finetune.summary.scheme", *under("finetune.summary.speed.", FT_FIGURES),
    *under("finetune.summary.memory.", FT_FIGURES))
# run where their inputs are: calibrate serve on two SGLang logs (tests/test_calibrate_serve.py, whose fit
# this shares) and calibrate gemm on the CPU (tests/test_gemm.py; needs torch)
FIGURES3 = ("throughput", "tpot", "ttft")
SCHEMA["calibrate serve"] = (
    "fitted.values[]", "fitted.by_gen.*", "at_bound.*", "cv_scheme", "out", *under("before.", FIGURES3),
    *under("after.", FIGURES3), *under("cv.", FIGURES3),
    *under("per_row[].", ("where", "isl", "osl", "load.*", *under("measured.", (
        "output_tokens_per_s", "ttft_s", "tpot_s", "e2e_s")), *under("error_before.", FIGURES3),
        *under("error_after.", FIGURES3))))
SCHEMA["calibrate gemm"] = (
    "base", "date", "device", "device_name", "dtype", "model", "measured", "out", "peak_flops", "torch_version",
    "fit.max_rel_error", "fit.rms_rel_error", "fit.samples",
    *under("fit.params.", ("max_efficiency", "half_dim", "half_flops")),
    *under("samples[].", ("label", "m", "n", "k", "time_s", "flops_per_s", "efficiency", "fitted")))
# keys only some runs have (a by-generation fit, a parameter on its bound, tied layouts, no missed row)
SOMETIMES = {"fitted.by_gen.*", "at_bound.*", "plans[].equivalent[]", "rows[].plan.equivalent[]",
             "algorithms[].unavailable_because", "missed[]", *under("missed[].", SERVE_PLAN_ROW), "missed[].interval",
             "candidates[]", "rows[].interval.cost[]", "deadline", "deadline.days", "deadline.by_hardware.*",
             *(f"{w}.variants[].{k}" for w in ("plans[]", "pareto[]", "rows[].plan") for k in VARIANT)}


# objects whose keys are data, not schema (see the module doc): their paths end in ".*"
OPEN = {
    "hardware": ("[].peak_tflops",), "stacks show": ("profile",), "calibrate parse": ("files[].inferred",),
    "calibrate fit": ("profile", "fits[].before", "fits[].after"),
    "calibrate runs --check": ("parameters", "summary.before.regret.per_configuration"),
    "validate": ("sources[].stack_calibration", "cross_validation.per_stack", "cross_validation.per_source",
                 "cross_validation.memory.per_stack", "cross_validation.memory.per_source"),
    "serve-plan": ("engine_evidence",), "sweep": ("deadline.by_hardware",), "sweep --deadline": ("deadline.by_hardware",),
    "engines": tuple(f"[].{k}" for k in ("decode_bandwidth", "max_num_batched_tokens", "max_num_seqs")),
    "engines show": ("decode_bandwidth", "max_num_batched_tokens", "max_num_seqs", "profile"),
    "validate --finetune": ("finetune.summary.speed.per_source", "finetune.summary.memory.per_source"),
    "validate --serving": ("serving.figures_by_scheme", "serving.per_source"),
    "calibrate serve": ("fitted.by_gen", "at_bound", "per_row[].load"),
}


def assert_keys_pinned(data, name: str) -> None:
    """The key paths of ``data`` (command ``name``'s --json object) are exactly SCHEMA[name], less
    the keys only some runs have (SOMETIMES)."""
    got = key_paths(data, OPEN.get(name, ()))
    want = set(SCHEMA[name])
    assert not got - want, f"keys not in the pinned schema (add them to SCHEMA and docs/json.md): {sorted(got - want)}"
    assert not want - got - SOMETIMES, f"pinned keys missing: {sorted(want - got - SOMETIMES)}"


def key_paths(x, open_=(), prefix: str = "", out: set | None = None) -> set[str]:
    """Every key path of a JSON value (see the module doc for the notation)."""
    out = set() if out is None else out
    if prefix in open_:
        out.add(prefix + ".*")
    elif isinstance(x, dict):
        for k, v in x.items():
            key_paths(v, open_, f"{prefix}.{k}" if prefix else k, out)
    elif isinstance(x, list):
        if not x:
            out.add(prefix + "[]")
        for v in x:
            key_paths(v, open_, prefix + "[]", out)
    else:
        out.add(prefix)
    return out


# ----------------------------------------------------------------------------- the runs

@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A synthetic nccl-tests log (10 % slower than its truth profile) and a two-run table."""
    d = tmp_path_factory.mktemp("json")
    (d / "truth.yaml").write_text(TRUTH_YAML)
    truth = load_hardware(str(d / "truth.yaml"))
    S = np.array(SWEEP)
    log = write_log(d / "ar.txt", "all_reduce", 8, 1, S, 1.1 * collective_time(truth, "all_reduce", S, 8, 8))
    runs = d / "runs.yaml"
    runs.write_text(yaml.safe_dump({"hardware": "h100-sxm", "runs": [
        {"model": "llama-3-8b", "gpus": 8, "tp": t, "global_batch": 64, "seq": 8192, "step_time_s": 5.0 + t}
        for t in (1, 2)]}))
    return {"dir": d, "log": log, "truth": d / "truth.yaml", "runs": runs}


COMMANDS = {
    "memory": ["memory", "llama-3-8b", "--gpus", "8"],
    "memory --per-stage --explain": ["memory", "llama-3-8b", "--gpus", "8", "--pp", "2", "--per-stage", "--explain"],
    "memory --inference": ["memory", "llama-3-8b", "--inference"],
    "memory --params": ["memory", "--params", "7.5B", "--dp", "64", "--zero", "3"],
    "step": ["step", "llama-3-8b", "--gpus", "8"],
    "plan": ["plan", "llama-3-8b", "--gpus", "8", "--top", "2", "--pareto", "--explain-rank", "6"],
    "collective": ["collective", "all-reduce", "--size", "1GiB", "--gpus", "16"],
    "bubble": ["bubble", "--pp", "4", "--microbatches", "8"],
    "bubble --layers": ["bubble", "--pp", "4", "--microbatches", "8", "--virtual-stages", "2", "--layers", "16"],
    "models": ["models"],
    "models show": ["models", "show", "llama-3-8b"],
    "hardware": ["hardware"],
    "stacks": ["stacks"],
    "stacks show": ["stacks", "show", "megatron-core"],
    "calibrate parse": ["calibrate", "parse", "{log}"],
    "calibrate fit": ["calibrate", "fit", "{log}", "--hardware", "a100-80gb", "--out", "{dir}/fit.yaml"],
    "calibrate check": ["calibrate", "check", "{log}", "--hardware", "{truth}", "--tolerance", "25%"],
    "calibrate runs --check": ["calibrate", "runs", "{runs}", "--check"],
    "validate": ["validate", "--source", "korthikanti2022-table5"],
    "sweep": ["sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "1T"],
    "sweep --deadline": ["sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "1T", "--deadline", "400d",
                         "--gpu-hour-price", "2.5"],
    "serve": ["serve", "llama-3-8b", "--concurrency", "8"],
    "serve --rate": ["serve", "llama-3-8b", "--rate", "2"],
    "serve-plan": ["serve-plan", "llama-3-8b", "--gpus", "8", "--ttft", "500ms", "--tpot", "30ms", "--top", "2"],
    "validate --serving": ["validate", "--serving"],
    "validate --finetune": ["validate", "--finetune"],
    "engines": ["engines"],
    "engines show": ["engines", "show", "vllm"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_json_keys_are_pinned(cli, inputs, name):
    """The key paths of ``llmpar <command> --json`` are exactly the pinned ones."""
    args = [a.format(**inputs) for a in COMMANDS[name]] + ["--json"]
    res = cli(*args)
    assert res.code == 0, (res.code, res.err)
    # keys that appear only for some rows (collective: unavailable_because; plan: the layouts that
    # tie a row exactly, equivalent[], listed only where a tie exists) may be absent here (SOMETIMES)
    assert_keys_pinned(res.json(), name)


def test_serve_plan_that_meets_nothing_keeps_its_keys(cli):
    """Exit 1 (no deployment meets the targets): the same object, its closest misses in ``missed``
    (their ``interval`` null: no band is drawn for a deployment not recommended)."""
    res = cli("serve-plan", "llama-3-70b", "--gpus", "8", "--ttft", "100ms", "--tpot", "10ms", "--json")
    assert res.code == 1, res.err
    d = res.json()
    assert d["candidates"] == [] and d["missed"] and all(m["meets"] is False for m in d["missed"])
    got = key_paths(d, OPEN["serve-plan"])
    assert got <= set(SCHEMA["serve-plan"]), sorted(got - set(SCHEMA["serve-plan"]))
    # a missed row has a candidate's keys, its bands null
    assert key_paths(d["missed"][0]) == {k for k in SERVE_PLAN_ROW if not k.startswith("interval.")} | {"interval"}


def test_hardware_show_has_the_keys_of_a_hardware_row(cli):
    rows = cli("hardware", "--json").json()
    one = cli("hardware", "show", "h100-sxm", "--json").json()
    spec = one.pop("spec")   # show alone adds the profile as validated, every field (the row's units aside)
    assert key_paths(one, ("peak_tflops",)) == {p[3:] for p in SCHEMA["hardware"]}
    assert one == next(r for r in rows if r["name"] == "h100-sxm")
    assert load_hardware("h100-sxm").model_validate(spec) == load_hardware("h100-sxm")


SNAKE = re.compile(r"^[a-z][a-z0-9_]*?(_GBps|_[0-9]+MB)?$")


def test_every_pinned_key_is_snake_case_with_its_unit():
    """docs/architecture.md: snake_case keys, units in the name (``_bytes``, ``_s``, ``_GBps``, ``_us``)."""
    for name, paths in SCHEMA.items():
        for path in paths:
            for part in re.split(r"\.|\[\]", path):
                assert part in ("", "*") or SNAKE.match(part), (name, path, part)


def test_common_keys_have_their_types(cli):
    """model, hardware, gpus and the parallel object (docs/architecture.md, CLI conventions) on every
    result that describes a layout: memory, step and each plan row."""
    outs = [cli("memory", "llama-3-8b", "--gpus", "8", "--json").json(),
            cli("step", "llama-3-8b", "--gpus", "8", "--json").json()]
    outs += cli("plan", "llama-3-8b", "--gpus", "8", "--top", "2", "--json").json()["plans"]
    for d in outs:
        assert isinstance(d["model"], str) and isinstance(d["hardware"], str) and type(d["gpus"]) is int
        p = d["parallel"]
        for k in ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "micro_batch", "global_batch", "microbatches", "seq",
                  "virtual_stages", "recompute_layers", "offload_layers"):
            assert type(p[k]) is int, k
        assert type(p["sp"]) is bool
        assert p["recompute"] in ("none", "selective", "full")
        assert p["schedule"] in ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipe")
        assert d["gpus"] == p["tp"] * p["pp"] * p["dp"] * p["cp"]
