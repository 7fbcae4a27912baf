"""Runs tables pasted from elsewhere (newcomer review: pipe-separated tables misread as 'no
layout'): a Markdown table and '|'-separated files are named as such, a .tsv is a table, not a
training log, and tabs are read as the separator."""

from tests.conftest import assert_one_line_error

HEADER = ["model", "gpus", "tp", "global_batch", "seq", "step_time_s"]
ROW = ["llama-3-8b", "8", "1", "64", "8192", "8.05"]


def test_markdown_table_is_named(cli, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER) + "\n| " + " | ".join(ROW) + " |\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--hardware", "h100-sxm", "--check"), "runs.csv:1",
                          "Markdown table")


def test_bar_separated_file_is_named(cli, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("|".join(HEADER) + "\n" + "|".join(ROW) + "\n")
    assert_one_line_error(cli("calibrate", "runs", f, "--hardware", "h100-sxm", "--check"), "'|' bars")


def test_tsv_file_is_read_as_a_table(cli, tmp_path):
    f = tmp_path / "runs.tsv"
    f.write_text("\t".join(HEADER) + "\n" + "\t".join(ROW) + "\n")
    res = cli("calibrate", "runs", f, "--hardware", "h100-sxm", "--check", "--json")
    assert res.code == 0, res.err            # --check without --tolerance reports, never fails
    row = res.json()["rows"][0]
    assert row["source"].endswith("runs.tsv:2") and row["measured_step_time_s"] == 8.05
