"""Write validation/residuals.json: the leave-one-source-out residual of every published row, the
data every interval llmpar prints is computed from (llmpar.evidence; docs/validation.md, Intervals).

    python scripts/write_residuals.py

Run it after scripts/fit_stacks.py --loso and after any change to the model or the published rows;
tests/test_evidence.py fails while the shipped file is not today's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from llmpar.evidence import RESIDUALS_FILE
from llmpar.validation import crossval
from llmpar.validation.core import validate

ROOT = Path(__file__).resolve().parents[1]


def records() -> dict:
    result = validate()
    return {"scheme": crossval.SCHEME,
            "generated_by": "python scripts/write_residuals.py",
            "about": "residual = ln(measured / predicted) of the step time (speed) or the peak (memory), "
                     "each row predicted leave-one-source-out (validation/loso-fits.json)",
            "residuals": crossval.residual_records(result.rows)}


if __name__ == "__main__":
    out = ROOT / "validation" / RESIDUALS_FILE
    data = records()
    # one residual a line: small diffs when a figure moves
    residuals = data.pop("residuals")
    body = ",\n".join(json.dumps(r, separators=(",", ":")) for r in residuals)
    head = json.dumps(data, indent=1)[:-2]
    out.write_text(head + ',\n "residuals": [\n' + body + "\n]}\n", encoding="utf-8")
    print(f"wrote {out} ({len(residuals)} residuals)", file=sys.stderr)
