"""Refit the shipped stacks' fitted values on the published runs in validation/ and print them
with their errors: in-sample, k-fold cross-validated over configurations, and (nanotron) on
the held-out runs. The values and errors recorded in stacks/*.yaml and docs/stacks.md come from
this script:

    python scripts/fit_stacks.py megatron-core      # H100: Megatron-Core table, NeMo FP8 tables, Llama 3
    python scripts/fit_stacks.py megatron-2022      # A100: Korthikanti 2022 Table 5, Narayanan 2021 Table 1
    python scripts/fit_stacks.py nanotron           # H100: playbook runs on 1-2 nodes; 4-64 nodes held out
    python scripts/fit_stacks.py megatron-core-blackwell   # B200/GB200: NeMo 25.11 dense rows; MoE rows held out
    python scripts/fit_stacks.py megatron-core-blackwell-moe   # B200/GB200: the 6 MoE rows (the per-MoE-layer cost)
    python scripts/fit_stacks.py torchtitan-compile # H100: the 16 torchtitan benchmark rows run with torch.compile
    python scripts/fit_stacks.py torchtitan         # H100: the 2 rows without compile (Tables 1 and 3, "FSDP")

It takes a few minutes per stack (every fold refits). The plans (sources, parameters, priors,
folds) are llmpar.validation.fit_plans.PLANS, where `llmpar validate` finds them too.

    python scripts/fit_stacks.py --loso             # every source refitted out: validation/loso-fits.json

refits every plan once per source it was fitted on, without that source (about 5 minutes), and
writes the record `llmpar validate` predicts each source with (docs/validation.md,
"Leave-one-source-out"). Run it after any change to a stack's fitted values or a fitted source.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import numpy as np

from llmpar.validation import fit_plans as FP

ROOT = Path(__file__).resolve().parents[1]
PLANS = FP.PLANS


def main(name: str) -> None:
    fit, held = FP.run_plan(name)
    out = {"stack": FP.plan_stack(name), "generation": fit.generation, "runs_fitted": len(fit.runs),
           # 4 decimals, or 4 significant digits below 0.01 (per-expert seconds)
           "parameters": {k: round(v["after"], 4) if abs(v["after"]) >= 0.01 else float(f"{v['after']:.4g}")
                          for k, v in fit.parameters.items()},
           "summary": fit.summary}
    if held is not None:
        out["held_out"] = {"runs": len(held.runs), **held.summary["before"]}
    print(json.dumps(out, indent=1, default=lambda x: float(x) if isinstance(x, np.floating) else str(x)))


def loso() -> None:
    held = {}
    for src in FP.fitted_sources():
        held[src] = FP.leave_one_source_out(src, progress=lambda s: print(s, file=sys.stderr, flush=True))
    record = {"scheme": "leave-one-source-out",
              "generated_by": "python scripts/fit_stacks.py --loso",
              "date": datetime.date.today().isoformat(),
              "about": "for each source some stack was fitted on (llmpar.validation.fit_plans."
                       "leave_one_source_out): scheme 'source': values = every plan that used it refitted "
                       "without it, {stack: {generation: {parameter: value}}}; scheme 'configurations' (the "
                       "source is its plan's only one): values = the full fit, folds = each k-fold's held-out "
                       "(model, GPUs, hardware) configurations and the values fitted without them",
              "fingerprint": FP.fingerprint(), "held_out": held}
    out = ROOT / "validation" / FP.LOSO_FILE
    out.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "megatron-core"
    if arg in ("-h", "--help"):
        print(__doc__)
    elif arg != "--loso" and arg not in PLANS:
        print(f"fit_stacks.py: unknown plan {arg!r}; one of: {', '.join(PLANS)}, or --loso", file=sys.stderr)
        sys.exit(2)
    else:
        loso() if arg == "--loso" else main(arg)
