"""`--html FILE.html` on `plan`, `sweep` and `validate` (issue 26, item 5; docs/cli.md, The HTML report).

The page is parsed with the standard library's HTMLParser: its tables must hold the same cells the
terminal prints (one home: plan_cmd.plan_cells, sweep_cmd.sweep_table), one inline SVG figure, no
script and no reference to anything outside the file. A headless Chromium (Debian's package,
installed by .ci/run where it can be) then renders it: the DOM it builds has the tables and the
figure, and its screenshot is not blank. Without Chromium that test skips and says why.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from tests.conftest import assert_one_line_error


class _Page(HTMLParser):
    """Tables by id (rows of cell texts), tag counts, and every src/href attribute."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.heads: dict[str, list[str]] = {}
        self.tags: dict[str, int] = {}
        self.refs: list[str] = []
        self._table = None
        self._row = None
        self._cell = None
        self._head = False
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for k in ("src", "href", "xlink:href"):
            if k in a and a[k] is not None:
                self.refs.append(a[k])
        if tag == "table":
            self._table = a.get("id")
            self.tables[self._table] = []
            self.heads[self._table] = []
        elif tag == "thead":
            self._head = True
        elif tag == "tbody":
            self._head = False
        elif tag == "tr" and self._table is not None and not self._head:
            self._row = []
        elif tag in ("td", "th") and self._table is not None:
            self._cell = ""
        elif tag == "title":
            self._in_title = True

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            if tag == "th" and self._head:
                self.heads[self._table].append(self._cell)
            elif self._row is not None:
                self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._in_title:
            self.title += data


def _parse(path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _self_contained(p: _Page) -> None:
    assert p.tags.get("script", 0) == 0 and p.tags.get("link", 0) == 0 and p.tags.get("iframe", 0) == 0
    # only in-page references (#id) and inline data: nothing fetched from the network or the disk
    assert all(r.startswith(("#", "data:")) for r in p.refs), [r for r in p.refs if not r.startswith(("#", "data:"))]


def test_sweep_page_holds_the_terminal_cells_and_the_hand_derived_days(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sweep.html"
    res = cli("sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "1T", "--gpu-hour-price", "2.5", "--html", out)
    assert res.code == 0, res.err
    assert f"report: {out}" in res.out
    page = _parse(out)
    _self_contained(page)
    assert page.title == "llmpar sweep llama-3-8b"
    rows, head = page.tables["plans"], page.heads["plans"]
    assert len(rows) == 2 and [r[1] for r in rows] == ["8", "16"]
    assert head[:3] == ["hardware", "GPUs", "layout"] and "eff. cost" in head
    # the same cells as the terminal table (sweep_cmd.sweep_table): one home for the formatting
    js = cli("sweep", "llama-3-8b", "--gpus", "8,16", "--tokens", "1T", "--gpu-hour-price", "2.5", "--json").json()
    for cells, row in zip(rows, js["rows"]):
        # days by hand: 1e12 tokens / (tokens/s) / 86,400 s per day
        days = 1e12 / row["plan"]["tokens_per_s"] / 86400
        assert math.isclose(row["days"], days, rel_tol=1e-9)
        assert cells[head.index("days")] == f"{days:.1f}"
    assert page.tags.get("svg", 0) == 1
    assert page.tags.get("li", 0) >= 3       # the assumptions are listed


def test_plan_page_lists_the_layouts_intervals_and_the_frontier(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plan.html"
    res = cli("plan", "llama-3-8b", "--gpus", "16", "--top", "4", "--tokens", "100B", "--html", out)
    assert res.code == 0, res.err
    page = _parse(out)
    _self_contained(page)
    rows = page.tables["plans"]
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    js = cli("plan", "llama-3-8b", "--gpus", "16", "--top", "4", "--json").json()
    for cells, p in zip(rows, js["plans"]):
        assert cells[1:4] == [str(p["parallel"]["tp"]), str(p["parallel"]["pp"]), str(p["parallel"]["dp"])]
    text = out.read_text(encoding="utf-8")
    assert 'id="intervals"' in text and "#1: step" in text
    assert 'id="training"' in text and "GPU-hours" in text
    assert page.tags.get("svg", 0) == 1
    # the frontier's tens of thousands of points are one embedded image, not one path each
    assert len(text) < 600_000


def test_validate_page_leads_with_the_leave_one_source_out_tables(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "validate.html"
    res = cli("validate", "--source", "korthikanti2022-table5", "--html", out)
    assert res.code == 0, res.err
    page = _parse(out)
    _self_contained(page)
    assert "cv-speed" in page.tables and "groups" in page.tables
    assert [r[0] for r in page.tables["cv-speed"]] == ["korthikanti2022-table5"]
    text = out.read_text(encoding="utf-8")
    assert text.index('id="cv-speed"') < text.index('id="groups"')
    serving = tmp_path / "serving.html"
    res = cli("validate", "--serving", "--html", serving)
    assert res.code == 0, res.err
    sp = _parse(serving)
    assert [r[0] for r in sp.tables["serving-0"]][:1] and len(sp.tables["serving-1"]) >= 9   # nine sources


def test_text_from_a_result_is_escaped():
    from llmpar.cli import report_html as H

    text = H.table("t", "a <caption> & more", [("name", False)], [["<script>alert(1)</script>"]])
    assert "<script>" not in text and "&lt;script&gt;" in text and "a &lt;caption&gt; &amp; more" in text
    assert "<script" not in H.page("x </title><script>", [text])


@pytest.mark.parametrize("args, needle", [
    (("sweep", "llama-3-8b", "--gpus", "8", "--html", "report.txt"), "name it .html"),
    (("plan", "llama-3-8b", "--gpus", "8", "--html", "/no/such/folder/r.html"), "no folder"),
    (("validate", "--source", "korthikanti2022-table5", "--html", "x.png"), "name it .html"),
])
def test_bad_html_paths_are_one_line_before_any_work(cli, args, needle):
    assert_one_line_error(cli(*args), "--html" if "html" in needle else "cannot write", needle)


def test_out_and_html_cannot_name_one_file(cli, tmp_path):
    f = tmp_path / "same.html"
    assert_one_line_error(cli("plan", "llama-3-8b", "--gpus", "8", "--emit", "megatron", "--out", f, "--html", f),
                          "--out and --html")
    assert not f.exists()


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium on this machine (.ci/run installs Debian's "
                                                 "chromium where it can: apt-get install chromium)")
def test_chromium_renders_the_sweep_page_with_its_table_and_figure(cli, tmp_path):
    image = pytest.importorskip("matplotlib.image")
    import numpy as np

    out = tmp_path / "sweep.html"
    assert cli("sweep", "llama-3-8b", "--gpus", "8,16,32", "--tokens", "1T", "--html", out).code == 0
    browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(browser + ["--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    page = _Page()
    page.feed(dom)
    assert len(page.tables["plans"]) == 3 and page.tags.get("svg", 0) == 1
    shot = tmp_path / "shot.png"
    subprocess.run(browser + [f"--screenshot={shot}", "--window-size=1200,900", out.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = image.imread(shot)[..., :3]
    dark = float(np.mean(pixels.mean(axis=-1) < 0.6))
    # a page of text, a table and a figure: more than 1 % of its pixels are ink; a blank page has none
    assert dark > 0.01, dark


@pytest.mark.parametrize("argv,option", [
    (["plan", "{m}", "--gpus", "8", "--html", "{m}"], "--html"),
    (["sweep", "{m}", "--gpus", "8", "--html", "{m}"], "--html"),
    (["step", "llama-3-8b", "--gpus", "8", "--hardware", "{h}", "--trace", "{h}"], "--trace"),
    (["plan", "llama-3-8b", "--gpus", "8", "--stack", "{s}", "--emit", "megatron", "--out", "{s}"], "--out"),
])
def test_no_writer_overwrites_a_file_the_command_reads(cli, tmp_path, argv, option):
    # reliability review, writers (a class): `plan m.html --html m.html` replaced the model YAML with the report
    from tests.conftest import REPO

    m, h, s = tmp_path / "m.html", tmp_path / "hw.json", tmp_path / "st.yaml"
    m.write_text((REPO / "models" / "llama-3-8b.yaml").read_text())
    h.write_text((REPO / "hardware" / "h100-sxm.yaml").read_text())
    s.write_text("name: mine\nextends: megatron-core\n")
    before = {p: p.read_bytes() for p in (m, h, s)}
    res = cli(*[a.format(m=m, h=h, s=s) for a in argv])
    assert_one_line_error(res, option, "one of the files this command reads")
    assert {p: p.read_bytes() for p in (m, h, s)} == before


def test_an_unwritable_folder_is_refused_before_any_work(cli):
    # `validate --html /proc/v.html` ran the whole validation, then failed on the write: every
    # writer now probes the folder first (outputs.check_out), in one line
    res = cli("validate", "--html", "/proc/llmpar-v.html")
    assert_one_line_error(res, "cannot write /proc/llmpar-v.html", "takes no new file")
    assert "deepseek" not in res.out      # nothing was validated first

