"""Why the planner rejects a candidate: each rule's one-line reason (the counts `plan` prints and
the JSON's ``space.rejected`` keys) and the knobs each rule reads (planner/space.py enumerates,
planner/refusals.py words the refusals)."""

REASONS = {
    "tp_heads": "tp does not divide the attention heads or the KV heads",
    "pp_layers": "pp exceeds the layers",
    "cp_seq": "cp does not divide the sequence",
    "ep": "ep does not divide the experts, or ep*etp does not divide tp*cp*dp (dp*cp when etp = tp)",
    "etp": "etp does not divide tp*cp*dp or the expert FFN width",
    "batch": "global batch not divisible by micro_batch*dp (or not the --microbatches asked for)",
    "sp_seq": "sequence parallelism needs seq/cp divisible by tp",
    "sp_tp": "sequence parallelism asked for at tp 1 (there are no TP ranks to split over)",
    "schedule": "schedule cannot run it (interleaved: m a multiple of pp, v >= 2 dividing the layers per stage; "
                "DualPipe: pp even, m even and >= 2*pp; a schedule other than 1F1B at pp 1)",
    "convention": "ZeRO stage outside what --convention covers",
    "stack": "the stack's framework does not launch it (layout.stack_violations: ZeRO stage under pipeline "
             "parallelism, or one it has only under pipeline parallelism)",
    "finetune": "LoRA/QLoRA is modelled data-parallel only: tp = pp = cp = ep = 1 (cost/finetune.layout_violations)",
    "optimizer_offload": "--optimizer-offload offloads ZeRO's optimizer partition: ZeRO 0 has none "
                         "(layout_settings.optimizer_offload_violations)",
    "param_offload": "--param-offload moves ZeRO-3's parameter shards: below ZeRO 3 there are none "
                     "(layout_settings.param_offload_violations)",
    "memory": "most-loaded stage does not fit in HBM minus the reserve",
    "host_memory": "offloaded activations exceed the GPU's share of host memory (hardware host_memory_per_gpu)",
}

# the knobs each rule reads: when one rule rejects every candidate on its own (its mask over all of
# them, not only those no earlier rule took) and the user held one of its knobs (--fix/--allow/
# --layout), the options contradict each other -- bad input (exit 2, refusals.nothing_valid), as
# `step` refuses the same layout, not a search that found nothing. (It had needed that rule to be the
# only one counted and every one of its knobs held: --finetune lora --fix tp=8 read exit 1.)
RULE_KNOBS = {
    "tp_heads": ("tp",),
    "pp_layers": ("pp",),
    "cp_seq": ("cp",),
    "ep": ("ep", "etp"),
    "etp": ("etp",),
    "sp_seq": ("sp", "tp", "cp"),
    "sp_tp": ("sp", "tp"),
    "schedule": ("schedule", "pp", "virtual_stages"),
    "stack": ("zero", "pp"),
    "convention": ("zero",),
    "finetune": ("tp", "pp", "cp", "ep"),
    "optimizer_offload": ("zero",),
    "param_offload": ("zero",),
}
