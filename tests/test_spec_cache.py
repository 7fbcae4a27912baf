"""The validated-spec cache (llmpar/specs/cache.py): a hit returns the same object validation
would, a changed spec or changed code is a different key, a broken cache is a miss, and
LLMPAR_NO_CACHE turns it off."""

from __future__ import annotations

import pytest

from llmpar.specs import cache
from llmpar.specs.hardware import Hardware
from llmpar.specs.registry import _hardware_dict, load_hardware, load_model


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("LLMPAR_NO_CACHE", raising=False)
    monkeypatch.setenv("LLMPAR_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_hit_is_the_validated_object(cache_dir):
    first = load_hardware("h100-sxm")                  # a miss: validated, then stored
    files = sorted(cache_dir.glob("*.pickle"))
    assert len(files) == 1
    second = load_hardware("h100-sxm")                 # a hit: read back
    assert second == first and second is not first
    assert second.gpu.peak("bf16") == 989e12 and second.tiers[-1].bandwidth == 50e9
    load_model("llama-3-70b")
    assert len(list(cache_dir.glob("*.pickle"))) == 2


def test_key_follows_the_data_and_the_code(cache_dir, monkeypatch):
    data, _ = _hardware_dict("h100-sxm")
    k = cache.key(Hardware, data)
    assert cache.key(Hardware, dict(data)) == k
    edited = dict(data, node_power="9 kW")
    assert cache.key(Hardware, edited) != k                       # any edit of the merged spec
    monkeypatch.setattr(cache, "_code_fingerprint", lambda: "other code")
    assert cache.key(Hardware, data) != k                         # another llmpar / pydantic / specs source


def test_broken_entry_is_a_miss(cache_dir):
    load_hardware("a100-80gb")
    (entry,) = cache_dir.glob("*.pickle")
    entry.write_bytes(b"not a pickle")
    hw = load_hardware("a100-80gb")                    # validated again, and stored again
    assert hw.gpu.peak("bf16") == 312e12
    assert entry.read_bytes() != b"not a pickle"


def test_off_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPAR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LLMPAR_NO_CACHE", "1")
    load_hardware("h100-sxm")
    assert cache.key(Hardware, {}) is None and not list(tmp_path.iterdir())


def test_no_home_directory_means_no_cache(monkeypatch):
    # Path.home() raises when neither HOME nor the password database names one: validate anyway
    from pathlib import Path

    from llmpar.specs.stack import Stack

    monkeypatch.delenv("LLMPAR_NO_CACHE", raising=False)
    monkeypatch.delenv("LLMPAR_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert cache.key(Stack, {}) is None
    assert load_hardware("h100-sxm").gpu.peak("bf16") == 989e12
