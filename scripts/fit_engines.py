"""Fit the shipped serving engines to validation/serving/ and record leave-one-source-out.

    python scripts/fit_engines.py            # fit, write validation/serving-loso.json and
                                             # validation/serving-residuals.json, print the values
    python scripts/fit_engines.py --check    # only print the LOSO summary of the stored record
    python scripts/fit_engines.py --residuals  # predict with the stored record, rewrite only
                                               # validation/serving-residuals.json (after a data edit
                                               # to rows no engine is fitted on: engine 'other')

The in-sample values printed are what engines/*.yaml carry as FITTED (docs/serving.md, Engines).
Rerun after any change to the serving cost model, an engine profile or the serving data:
tests/test_serving_evidence.py fails when the stored residuals are stale.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    from llmpar.serving import report
    from llmpar.serving.fit import PARAMS, cross_engine_prior, engine_rows, fit, leave_one_source_out, predict_loso
    from llmpar.serving.published import ENGINES, shipped_rows
    from llmpar.specs.registry import load_engine

    ap = argparse.ArgumentParser()
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--residuals", action="store_true")
    args = ap.parse_args()
    rows = shipped_rows()
    engines = {n: load_engine(n) for n in ENGINES}
    if args.check or args.residuals:
        record = report.load_record().get("engines", {})
    else:
        # stage 1: each engine in sample under the hand priors (PRIORS); stage 2: each engine's
        # prior is the other engines' stage-1 fits (fit.cross_engine_prior), then its in-sample fit
        # and its leave-one-source-out folds are made under that prior
        first = {name: (fit(engine_rows(rows, name), eng) if engine_rows(rows, name) else None)
                 for name, eng in engines.items()}
        record = {}
        for name, eng in engines.items():
            t = time.perf_counter()
            record[name] = leave_one_source_out(rows, eng, prior=cross_engine_prior(name, first))
            print(f"{name}: {len(record[name]['sources'])} sources, {time.perf_counter() - t:.0f} s", file=sys.stderr)
    results = predict_loso(rows, engines, record)
    records = report.residual_records(results)
    if not args.check:
        if not args.residuals:
            (ROOT / "validation" / report.LOSO_FILE).write_text(json.dumps({"engines": record}, indent=1) + "\n")
        res = [{"source": r.source, "kind": r.kind, "class": list(r.key), "residual": round(r.value, 6)}
               for r in records]
        text = "{\n \"residuals\": [\n" + ",\n".join("  " + json.dumps(x) for x in res) + "\n ]\n}\n"
        (ROOT / "validation" / "serving-residuals.json").write_text(text)
    for name, rec in record.items():
        if rec.get("in_sample"):
            fitted = rec["in_sample"]
            print(name, dict(zip([f"{s}.{n}" for s, n, *_ in PARAMS], [round(v, 5) for v in fitted["values"]])),
                  {f"decode_bandwidth.{g}": round(v, 4) for g, v in fitted["by_gen"].items()})
    print(json.dumps(report.summary(records), indent=1))
    for s, d in report.per_source(records).items():
        print(s, {k: f"{v['median_abs_error'] * 100:.0f}% ({v['signed_median'] * 100:+.0f}%, {v['figures']})"
                  for k, v in d.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
