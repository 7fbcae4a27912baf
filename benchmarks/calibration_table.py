"""The before/after table of docs/calibration.md, section 7: `calibrate fit` then `calibrate check`
on every real nccl-tests log of ../shared/validation/nccl-logs and on the Azure A100 sweep of
../shared/validation/public.yaml.

    PYTHONPATH=src python benchmarks/calibration_table.py            # the markdown table
    PYTHONPATH=src python benchmarks/calibration_table.py --json     # the same figures as JSON

"Before" is the shipped profile as is; "after" is `calibrate fit` on that one log, written and
loaded back, then `calibrate check` of the same log (exactly what tests/test_calibrate_check.py
::test_fit_then_check_real_log does). |error| of time, out-of-place. The wall time of each fit is
printed to stderr (a figure, never a failure).

The MI300X logs are fitted from the shipped mi300x profile (hardware/mi300x.yaml).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
LOGS = SHARED / "validation" / "nccl-logs"
PUBLIC = SHARED / "validation" / "public.yaml"

BASE_FOR_GPU = {"A100": "a100-80gb", "H100": "h100-sxm", "H200": "h200", "GB200": "gb200-nvl72", "MI300X": "mi300x"}


def _azure_log(tmp: Path) -> Path:
    """The Azure ND A100 v4 8-GPU all_reduce sweep as an nccl-tests log (time = size / algbw,
    algbw = busbw / 1.75), as tests/test_calibrate_check.py writes it."""
    sys.path.insert(0, str(REPO / "tests"))
    from _synthetic_nccl import write_log

    data = yaml.safe_load(PUBLIC.read_text())["nccl_allreduce_single_node_azure"]
    run = next(r for r in data["runs"] if r["gpu"].startswith("A100") and r["num_gpus"] == 8)

    def size(label):
        num, unit = float(label[:-1]), label[-1]
        return 1 << round(math.log2(num * {"K": 1e3, "M": 1e6, "G": 1e9}[unit]))

    S = np.array([size(x["message_size_label"]) for x in run["sweep"]], dtype=float)
    T = S / (np.array([x["busbw_GBps"] for x in run["sweep"]]) * 1e9 / 1.75)
    return write_log(tmp / "azure-a100.txt", "all_reduce", 8, 1, S, T, gpu="NVIDIA A100-SXM4-80GB")


def rows() -> list[dict]:
    from llmpar.calibrate import check as C
    from llmpar.calibrate import fit as F
    from llmpar.calibrate.nccl_tests import parse_files

    out = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cases = []
        for e in yaml.safe_load((LOGS / "index.yaml").read_text())["logs"]:
            gpu = next(k for k in ("GB200", "A100", "H100", "H200", "MI300X") if k in e["gpu_model"])
            base = BASE_FOR_GPU[gpu]
            cases.append((e["file"][:2], LOGS / e["file"], base, base))
        if PUBLIC.is_file():
            cases.append(("Azure", _azure_log(tmp), "a100-80gb", "a100-80gb"))
        for label, path, base, base_label in cases:
            logs = parse_files([path])
            t0 = time.perf_counter()
            res = F.fit(logs, base)
            wall = time.perf_counter() - t0
            prof = F.write_profile(res, tmp / f"fit-{label}.yaml")
            before = C.check(logs, base, tolerance=0.05).summary
            after = C.check(logs, str(prof), tolerance=0.05).summary
            f = res.files[0]
            print(f"{label}: fit {wall:.2f} s", file=sys.stderr)
            out.append({"log": label, "base": base_label, "tier": f["tier"], "members_per_node": f["members_per_node"],
                        "before": before, "after": after, "fit_s": round(wall, 3)})
    return out


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not (LOGS / "index.yaml").is_file():
        sys.exit(f"{LOGS} not present")
    got = rows()
    if args.json:
        print(json.dumps(got, indent=1))
        return
    print("| log | base profile | tier fitted (k per domain) | median ≥ 1 MB before → after "
          "| median ≥ 64 MB before → after | max ≥ 1 MB before → after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in got:
        b, a = r["before"], r["after"]
        cells = [f"{_pct(b[k])} → {_pct(a[k])}" for k in
                 ("median_abs_error_ge_1MB", "median_abs_error_ge_64MB", "max_abs_error_ge_1MB")]
        print(f"| {r['log']} | {r['base']} | {r['tier']} ({r['members_per_node']}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
