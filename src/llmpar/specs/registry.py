"""Find and load shipped or user specs.

Shipped YAML files live in the repository's top-level ``hardware/`` and ``models/`` folders. The
wheel carries them as ``llmpar/data/{hardware,models}`` (hatch ``force-include``); an editable or
source-tree run falls back to the repository folders (docs/architecture.md, Data files).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from llmpar.errors import UserError, suggest
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.specs.stack import Stack


from llmpar.specs.reading import (  # noqa: F401 (the readers below the loaders; re-exported)
    MAX_YAML_BYTES, MAX_YAML_VALUES, DuplicateKeyError, UniqueKeyLoader, data_dir, read_yaml, unique_json_pairs,
    validate, validation_message,
)


@functools.lru_cache(maxsize=None)
def spec_index(kind: str) -> dict[str, tuple[str, Path]]:
    """name or alias -> (canonical name, file) for the shipped specs."""
    out: dict[str, tuple[str, Path]] = {}
    for path in sorted(data_dir(kind).glob("*.yaml")):
        data = read_yaml(path)
        name = str(data.get("name", path.stem))
        out[name] = (name, path)
        for alias in data.get("aliases", []) or []:
            out[str(alias)] = (name, path)
    return out


def spec_lookup(kind: str, key: str) -> tuple[str, Path] | None:
    """(canonical name, file) for a shipped name or alias typed in lower case, or None.

    A shipped spec's canonical name is its file's stem and no alias is another file's stem
    (tests/test_specs_cmd.py checks both), so a canonical name reads one file instead of
    parsing every shipped spec for its aliases (about 25 ms of `llmpar memory`'s start-up)."""
    path = data_dir(kind) / f"{key}.yaml"
    if key and path.is_file():
        return key, path
    return spec_index(kind).get(key)


def shipped_names(kind: str) -> list[str]:
    return sorted({canon for canon, _ in spec_index(kind).values()})


def looks_like_path(name: str) -> bool:
    """A spec name that names a file (a YAML/JSON suffix or a path separator), not a shipped spec."""
    return name.endswith((".yaml", ".yml", ".json")) or "/" in name or "\\" in name


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep merge for ``extends:``; lists of mappings with a string ``name`` merge item by item
    (anything else replaces the base's value, and validation then says what is wrong with it)."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _merge(old, value)
        elif (
            isinstance(old, list)
            and isinstance(value, list)
            and value          # an empty list replaces (and is then refused where a list may not be empty)
            and all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in old + value)
        ):
            merged = {x["name"]: x for x in old}
            for item in value:
                merged[item["name"]] = _merge(merged.get(item["name"], {}), item)
            out[key] = list(merged.values())
        else:
            out[key] = value
    return out


def _spec_path(kind: str, name: str, folder: Path | None = None) -> Path:
    """The file ``name`` names: a YAML path (relative to ``folder``, the folder of the file whose
    ``extends:`` names it, when given) or a shipped name."""
    what = {"hardware": "hardware", "stacks": "stack", "models": "model", "engines": "engine"}[kind]
    listing = {"hardware": "llmpar hardware", "stacks": "llmpar stacks", "models": "llmpar models",
               "engines": "llmpar engines"}[kind]
    if looks_like_path(name):
        path = Path(os.path.normpath(name))
        if folder is not None and not path.is_absolute():
            path = Path(os.path.normpath(folder / path))
        if path.exists() and not path.is_file():
            raise UserError(f"{what} {path} is a folder, not a YAML file" if path.is_dir()
                            else f"{what} {path} is not a regular file")
        if not path.is_file():
            where = f" (relative to {folder}, the folder of the file that extends it)" \
                if folder is not None and not Path(name).is_absolute() else ""
            raise UserError(f"{what} file not found: {path}{where}")
        return path
    found = spec_lookup(kind, name.lower())
    if found is None:
        raise UserError(f"unknown {what} {name!r}{suggest(name, spec_index(kind))}; see `{listing}`")
    return Path(found[1])


def _spec_dict(kind: str, name: str, seen: tuple[str, ...] = (),
               folder: Path | None = None) -> tuple[dict[str, Any], str]:
    """The YAML mapping of a shipped ``kind`` spec by name, or of a file, with ``extends:`` merged.

    ``folder``: the folder of the file whose ``extends:`` names ``name``; a relative path there is
    relative to that file's folder (not to the working directory), so a file and the base it
    extends can move together. A name that does not look like a path is a shipped name, as before."""
    what = {"hardware": "hardware", "stacks": "stack", "models": "model", "engines": "engine"}[kind]
    path = _spec_path(kind, name, folder)
    if str(path) in seen:
        raise UserError(f"{what} 'extends' loops through {path}")
    data = read_yaml(path)
    base = data.get("extends")
    if "extends" in data and (base is None or not str(base).strip() or str(base).strip() in (".", "..")):
        raise UserError(f"{path}: extends {base!r} names no {what}: give a shipped name or a YAML file, "
                        f"or leave extends out")
    if base:
        try:
            # relative to the folder the file's contents live in (a symlinked file: its target's)
            folder = Path(path).resolve().parent if Path(path).is_symlink() else path.parent
            base_dict, _ = _spec_dict(kind, str(base), seen + (str(path),), folder)
        except UserError as exc:   # say which file's `extends` led there
            if str(path) in str(exc):
                raise
            raise UserError(f"{path}: extends {str(base)!r}: {exc}") from None
        base_dict.pop("aliases", None)
        # records of the base, not of this file: never inherited and never merged key by key (a
        # child's calibration record lists its own fitted parameters, not the base's as well)
        for key in ("calibration", "fitted_on", "description"):
            base_dict.pop(key, None)
        data = _merge(base_dict, data)
        data["extends"] = str(base)
    data.setdefault("name", path.stem)
    return data, str(path)


def spec_chain(kind: str, name: str) -> list[Path]:
    """Every file a spec is read from: the file (or shipped file) ``name`` names, then each file its
    ``extends:`` chain goes through, resolved as :func:`_spec_dict` resolves them (what a writer
    must not overwrite: llmpar.outputs.check_out). Stops at a loop or a name it cannot resolve."""
    out: list[Path] = []
    folder: Path | None = None
    cur: Any = str(name)
    while cur:
        try:
            path = _spec_path(kind, str(cur), folder)
        except UserError:
            break
        if path in out:
            break
        out.append(path)
        try:
            cur = read_yaml(path).get("extends")
        except UserError:
            break
        folder = path.resolve().parent if path.is_symlink() else path.parent
    return out


def _hardware_dict(name: str, seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], str]:
    return _spec_dict("hardware", name, seen)


def _spec_validated(cls: type[BaseModel], data: dict[str, Any], source: str, kind: str | None = None):
    """A hardware profile or stack from its merged mapping: ``aliases`` (a registry key, not a
    field of the class) must be a list of names, then the rest is validated strictly. With
    ``kind``, a bad value inherited through ``extends:`` is named in the file that holds it."""
    aliases = data.pop("aliases", None)
    if aliases is not None and not (isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)):
        raise UserError(f"invalid spec {source}: field 'aliases': expected a list of names, got {aliases!r}")
    chain = (lambda: spec_chain(kind, source)) if kind and "extends" in data else None
    return validate(cls, data, source, chain=chain)


#: the profile every command and API function uses when none is named (CLI --hardware's default;
#: ``hardware=None`` in the API)
DEFAULT_HARDWARE = "h100-sxm"


def load_hardware(name: str | None) -> Hardware:
    """A shipped profile by name (``h100-sxm``) or a YAML path, with ``extends:`` resolved; None:
    :data:`DEFAULT_HARDWARE`."""
    if isinstance(name, Hardware):
        return name
    if name is None:
        name = DEFAULT_HARDWARE
    data, source = _hardware_dict(str(name))
    return _spec_validated(Hardware, data, source, "hardware")


DEFAULT_STACK = "megatron-core"


@functools.lru_cache(maxsize=64)
def _load_stack_cached(name: str) -> Stack:
    data, source = _spec_dict("stacks", name)
    return _spec_validated(Stack, data, source, "stacks")


def load_stack(name: str | Stack | None = None) -> Stack:
    """A shipped stack by name (``megatron-core``), a YAML path, or a loaded :class:`Stack`;
    ``None`` is the default stack (DEFAULT_STACK)."""
    if isinstance(name, Stack):
        return name
    name = DEFAULT_STACK if name is None else str(name)
    if looks_like_path(name):   # a user file may change between calls: not cached
        data, source = _spec_dict("stacks", name)
        return _spec_validated(Stack, data, source, "stacks")
    return _load_stack_cached(name.lower())


DEFAULT_ENGINE = "vllm"


def load_engine(name=None):
    """A shipped serving engine by name (``vllm``), a YAML path, or a loaded Engine; ``None`` is
    DEFAULT_ENGINE (docs/serving.md, Engines)."""
    from llmpar.specs.engine import Engine

    if isinstance(name, Engine):
        return name
    name = DEFAULT_ENGINE if name is None else str(name)
    data, source = _spec_dict("engines", name if looks_like_path(name) else name.lower())
    return _spec_validated(Engine, data, source, "engines")


def load_model(name: str) -> ModelSpec:
    """A shipped model by name or alias (``llama-70b``), a YAML path, or a HF ``config.json``."""
    if isinstance(name, ModelSpec):
        return name
    name = str(name)
    if name.endswith(".json"):
        from llmpar.specs.hf import load_hf_config

        return load_hf_config(Path(name))
    if looks_like_path(name):
        path = Path(name)
        if path.is_dir():
            raise UserError(f"model {name} is a folder, not a YAML file (a HF checkpoint folder: --hf its config.json)")
        if path.exists() and not path.is_file():
            raise UserError(f"model {name} is not a regular file")
        if not path.is_file():
            if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not name.endswith((".yaml", ".yml")):
                # newcomer review: a Hugging Face hub id read as a missing file
                raise UserError(f"model file not found: {name} (a Hugging Face hub id? llmpar does not fetch "
                                "from the hub: download its config.json and pass --hf path/config.json, or use a "
                                "shipped name, `llmpar models`)")
            raise UserError(f"model file not found: {name}")
        data = read_yaml(path)
        raw = data
        if "extends" in data:
            data = _model_extended(str(path))
        data.setdefault("name", path.stem)
        spec = validate(ModelSpec, data, str(path),
                        chain=(lambda: spec_chain("models", str(path))) if "extends" in raw else None)
        own = raw.get("name")
        if isinstance(own, str) and (hit := spec_lookup("models", own.strip().lower())) is not None \
                and not _same_file(path, hit[1]) and read_yaml(Path(hit[1])) != raw:
            # reliability review item 35 (as item 8 for a runs table's inline models): a file named
            # llama-3-70b holding another model printed as the shipped one (a verbatim copy is that model)
            raise UserError(f"{path}: name {own!r} is a shipped model's (or alias's) name, but this file is not "
                            f"that model: give it a name of its own")
        return spec
    key = name.lower()
    found = spec_lookup("models", key)
    if found is None:
        raise UserError(f"unknown model {name!r}{suggest(key, spec_index('models'))}; see `llmpar models`")
    _canon, path = found
    data = read_yaml(path)
    if "extends" in data:
        data = _model_extended(str(path))
    return validate(ModelSpec, data, str(path))


def _same_file(a, b) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _model_extended(path: str) -> dict[str, Any]:
    """A model YAML with ``extends: BASE`` (a shipped model or a path): the base's shapes merged
    under the file's own keys; the base's name, aliases, description and source are not inherited."""
    own = read_yaml(Path(path))
    data, _ = _spec_dict("models", path)
    base = data.pop("extends", None)
    # reliability review item 35: a file extending llama-3-8b with layers 64 printed the base's
    # name and source as if it were that model
    data["name"] = own.get("name", Path(path).stem)
    data["source"] = own.get("source", f"{path}, extending {base}")
    return data


def resolved_name(name: str, kind: str = "models") -> tuple[str, str | None]:
    """(canonical name, alias typed or None) — so output can show 'llama-70b -> llama-3-70b'."""
    key = str(name).lower()
    found = spec_lookup(kind, key)
    if found is not None and found[0] != key:
        return found[0], key
    return (found[0] if found is not None else str(name)), None
