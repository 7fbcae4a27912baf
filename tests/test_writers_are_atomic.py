"""Every file llmpar writes for a user goes through a temporary file in the same folder and a
rename (issue 24 §2: "writes atomically (temp file + rename) only after the result is valid"):
llmpar.outputs.write_text / write_spec, or the same pattern where a library writes the bytes
(matplotlib's savefig in cli/plots.save). `calibrate bench` had written its logs in place (review of
2026-12-03). This test reads the source: a direct ``.write_text(`` or ``savefig(`` outside those
places fails it, so a new writer cannot skip the rule."""

from __future__ import annotations

import re

from conftest import REPO

SRC = REPO / "src" / "llmpar"
# (module, why its direct write is not a user's file or is the atomic pattern itself)
ALLOWED = {
    "outputs.py": "the atomic writer itself (tmp.write_text, then os.replace)",
    "cli/plots.py": "savefig to a temporary file, then os.replace",
    "cli/report_html.py": "savefig into an in-memory buffer",
    "calibrate/fit.py": "a temporary directory, to load the profile it is about to write",
    "specs/cache.py": "the validated-spec cache: a temporary file, then os.replace",
}


def test_no_module_writes_a_file_in_place():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in ALLOWED:
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"\.write_text\(|\.write_bytes\(|savefig\(|open\([^)]*['\"][wa]b?['\"]", text):
            offenders.append(f"{rel}:{text[:m.start()].count(chr(10)) + 1}")
    assert not offenders, f"write through llmpar.outputs.write_text (temp file + rename): {offenders}"
