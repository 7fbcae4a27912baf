"""docs/api.md cannot rot (issue 10, "Docs that cannot rot"): every ```python block on the page
runs, and the capacity-planning script writes its CSV (and its plot when matplotlib is
installed, or says why not when it is not)."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
MARK = "<!-- capacity-planning script"


def _blocks() -> list[tuple[int, str]]:
    """(line, code) of every ```python block of docs/api.md."""
    text = PAGE.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)]


def _capacity_script() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert MARK in text, "docs/api.md lost its capacity-planning script"
    m = re.search(r"```python\n(.*?)^```$", text[text.index(MARK):], re.DOTALL | re.MULTILINE)
    return m.group(1)


def _run(code: str, where: Path, monkeypatch, capsys) -> str:
    monkeypatch.chdir(where)
    exec(compile(code, str(PAGE), "exec"), {"__name__": "__main__"})
    return capsys.readouterr().out


SNIPPETS = [b for b in _blocks() if b[1] != _capacity_script()]


@pytest.mark.parametrize("line,code", SNIPPETS, ids=[f"api.md:{line}" for line, _ in SNIPPETS])
def test_reference_snippets_run(line, code, tmp_path, monkeypatch, capsys):
    out = _run(code, tmp_path, monkeypatch, capsys)
    assert out.strip(), f"docs/api.md line {line}: the snippet printed nothing"
    if "params=\"7.5B\"" in code:
        assert "1.875 GB" in out          # the value the page's comment states (ZeRO paper, Fig. 1)


def _check_csv(path: Path) -> list[dict]:
    rows = list(csv.DictReader(path.open()))
    assert [(r["hardware"], int(r["gpus"])) for r in rows] == [
        (hw, n) for hw in ("h100-sxm", "a100-80gb") for n in (64, 128, 256, 512)]
    for r in rows:
        assert r["status"] == "ok", r
        d = dict(x.split("=") for x in r["layout"].split())
        # the layout uses every GPU: tp·pp·dp·cp = gpus (docs/architecture.md, Degrees)
        assert int(d["tp"]) * int(d["pp"]) * int(d["dp"]) * int(d["cp"]) == int(r["gpus"])
        # days = 2T tokens / tokens per second / 86,400; GPU-hours = days x 24 x GPUs
        assert float(r["days"]) == pytest.approx(2e12 / float(r["tokens_per_s"]) / 86400, rel=1e-9)
        assert float(r["gpu_hours"]) == pytest.approx(float(r["days"]) * 24 * int(r["gpus"]), rel=1e-9)
        assert float(r["cost"]) == pytest.approx(2.5 * float(r["gpu_hours"]), rel=1e-9)
        assert 0 < float(r["mfu"]) < 1
    return rows


def test_capacity_planning_script_with_matplotlib(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    out = _run(_capacity_script(), tmp_path, monkeypatch, capsys)
    _check_csv(tmp_path / "capacity.csv")
    assert "wrote capacity.png" in out
    png = tmp_path / "capacity.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the figure has one line per hardware profile in each panel, and the labels the page promises
    import matplotlib.pyplot as plt

    fig = plt.gcf()
    days, mfu = fig.axes
    assert days.get_ylabel() == "days to train 2T tokens" and mfu.get_ylabel() == "MFU (%)"
    for ax in (days, mfu):
        assert [ln.get_label() for ln in ax.get_lines()] == ["h100-sxm", "a100-80gb"]
        assert all(list(ln.get_xdata()) == [64, 128, 256, 512] for ln in ax.get_lines())
    plt.close("all")


def test_capacity_planning_script_without_matplotlib(tmp_path, monkeypatch, capsys):
    """Without matplotlib the script writes the CSV, says there is no plot, and raises nothing."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # `import matplotlib` raises ImportError
    out = _run(_capacity_script(), tmp_path, monkeypatch, capsys)
    _check_csv(tmp_path / "capacity.csv")
    assert "matplotlib is not installed" in out and not (tmp_path / "capacity.png").exists()


def test_readme_python_snippet_runs(tmp_path, monkeypatch, capsys):
    """README's "From Python" block is the API as it is."""
    text = (PAGE.parents[1] / "README.md").read_text(encoding="utf-8")
    start = text.index("From Python:")
    m = re.search(r"```python\n(.*?)^```$", text[start:], re.DOTALL | re.MULTILINE)
    out = _run(m.group(1), tmp_path, monkeypatch, capsys)
    assert "does_not_fit" in out and "('a100-80gb', 512," in out
