"""The built wheel carries the shipped YAML specs and finds them through importlib.resources from
any directory (issue 2: `hardware/` and `models/` force-included into the wheel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("llmpar-*.whl")
    return whl


def test_wheel_contains_every_spec(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for kind in ("models", "hardware"):
        shipped = sorted(p.name for p in (REPO / kind).glob("*.yaml"))
        inside = sorted(Path(n).name for n in names if n.startswith(f"llmpar/data/{kind}/") and n.endswith(".yaml"))
        assert shipped and inside == shipped


def test_installed_wheel_works_from_any_directory(wheel, tmp_path):
    # Unpack the wheel (what pip install does for a pure-Python wheel) and run llmpar from an
    # unrelated directory: the specs must come from the package's data, not from the repository.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = ("import json, llmpar.specs.registry as r; "
            "print(json.dumps([str(r.data_dir('models')), str(r.data_dir('hardware'))]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    dirs = json.loads(proc.stdout)
    assert all(d.startswith(str(site)) for d in dirs), dirs
    proc = subprocess.run([sys.executable, "-m", "llmpar", "memory", "llama-70b", "--zero", "3", "--json"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    # one DGX H100 by default: ZeRO-3 over 8 GPUs; llama-70b is an alias of llama-3-70b
    assert d["model"] == "llama-3-70b" and d["gpus"] == 8 and d["parallel"]["zero"] == 3


def test_console_entry_point_help():
    proc = subprocess.run([sys.executable, "-m", "llmpar", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "memory" in proc.stdout and "plan" in proc.stdout
    # --help must not import the heavy optional extras
    code = "import sys; from llmpar.cli.main import cli; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "False"]
