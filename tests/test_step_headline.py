"""`step` on a layout that does not fit says so before its time (newcomer review: the headline
read '494 s per step' and the DOES NOT FIT verdict came after the breakdown table)."""


def test_step_headline_says_does_not_fit_first(cli):
    """llama-3-70b on 8 H100 at tp 8, ZeRO 0: 70.55B x 16 B / 8 = 141 GB of model states alone
    exceed 85.9 GB, so the first line after the assumptions is the verdict."""
    res = cli("step", "llama-3-70b", "--gpus", "8", "--tp", "8")
    assert res.code == 0, res.err
    lines = [ln for ln in res.out.splitlines() if ln.strip()]
    first = next(i for i, ln in enumerate(lines) if "DOES NOT FIT" in ln)
    headline = next(i for i, ln in enumerate(lines) if " per step  ·" in ln)
    assert first == headline - 1
    assert "if it fit" in lines[first]


def test_step_headline_plain_when_it_fits(cli):
    res = cli("step", "llama-3-8b", "--gpus", "8", "--tp", "8")
    assert res.code == 0, res.err
    assert "DOES NOT FIT" not in res.out
    assert "FITS" in res.out
