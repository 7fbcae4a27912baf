"""Find and load shipped or user specs.

Shipped YAML files live in the repository's top-level ``hardware/`` and ``models/`` folders. The
wheel carries them as ``llmpar/data/{hardware,models}`` (hatch ``force-include``); an editable or
source-tree run falls back to the repository folders (docs/architecture.md, Data files).
"""

from __future__ import annotations

import functools
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from llmpar.errors import UserError, suggest
from llmpar.specs.hardware import Hardware
from llmpar.specs.model import ModelSpec
from llmpar.specs.stack import Stack


def data_dir(kind: str) -> Path:
    """Folder holding the shipped ``kind`` ('hardware', 'models', 'stacks', 'engines' or 'validation') YAML files."""
    # A source checkout (editable install) reads the repository folder first: hatch's editable
    # install copies force-included data once, at install time, so that copy goes stale.
    repo = Path(__file__).resolve().parents[3] / kind
    if repo.is_dir() and (repo.parent / "pyproject.toml").is_file():
        return repo
    try:
        packaged = resources.files("llmpar").joinpath("data").joinpath(kind)
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError, TypeError):  # editable installs
        pass
    repo = Path(__file__).resolve().parents[3] / kind
    if repo.is_dir():
        return repo
    raise UserError(f"llmpar's shipped {kind}/ folder is missing (broken install?)")


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last one
    silently, so a duplicated ``memory:`` line would override the first without a word). Built on
    libyaml's parser where PyYAML has it (about 10x faster than the pure-Python one: reading every
    shipped spec for the name index was most of `llmpar memory`'s start-up)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node, deep: bool = False):
    loader.flatten_mapping(node)   # merge keys (<<) first, as SafeLoader does
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:   # an unhashable key (a list or mapping): construct_mapping reports it
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"duplicate key {key!r} (first given on line {first})", key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)

# Numbers as YAML 1.2's core schema reads them, not YAML 1.1's (reliability review, items 20 and
# 36): `3e9` and `5e-1` are floats (1.1 wants a dot and reads them as text, which a float field
# then refused as "not a valid number"); `010` is ten (1.1: octal eight); `1:30` is text (1.1:
# sexagesimal ninety), so a field expecting a number says so. Underscores between digits stay
# allowed; 0o17 and 0x1f are the octal and hex forms.
_INT = r"^(?:[-+]?[0-9][0-9_]*|0o[0-7_]+|0x[0-9a-fA-F_]+)$"
_FLOAT = r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(_INT_TAG, re.compile(_INT), list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(_FLOAT_TAG, re.compile(_FLOAT), list("-+0123456789."))


class DuplicateKeyError(ValueError):
    """A JSON object that gives a key twice (:func:`unique_json_pairs`)."""


def unique_json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json ``object_pairs_hook``: a key given twice is refused (json keeps the last one silently),
    as the YAML readers refuse it (:class:`_UniqueKeyLoader`); used by the runs tables' JSON and
    the HF config.json reader."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _construct_int(loader, node) -> int:
    text = loader.construct_scalar(node).replace("_", "")
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _construct_float(loader, node) -> float:
    text = loader.construct_scalar(node).replace("_", "").lower()
    if text.lstrip("+-") == ".inf":
        return float("-inf") if text.startswith("-") else float("inf")
    if text == ".nan":
        return float("nan")
    return float(text)


_UniqueKeyLoader.add_constructor(_INT_TAG, _construct_int)
_UniqueKeyLoader.add_constructor(_FLOAT_TAG, _construct_float)


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text of a spec file; bytes that are not UTF-8 are one line naming file and line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                        "spec files must be UTF-8") from None


#: a YAML file llmpar reads is at most this large, and expands (aliases followed as a reader of
#: the loaded object follows them) to at most this many values: the largest shipped file, the
#: playbook grid, is 0.3 MB and ~40,000 values; a "billion laughs" alias bomb hangs any reader
#: that walks it (reliability review, item 12)
MAX_YAML_BYTES = 64 * 2**20
MAX_YAML_VALUES = 2_000_000


def _expands_beyond(data: Any, limit: int) -> bool:
    """Whether walking ``data`` (every shared reference visited each time it is referenced, as a
    serialiser or validator would) visits more than ``limit`` values; stops as soon as it does."""
    stack, seen = [data], 0
    while stack:
        x = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return False


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping; malformed YAML (including a duplicated key or bytes that are not
    UTF-8), a file beyond MAX_YAML_BYTES or one whose aliases expand beyond MAX_YAML_VALUES is one
    line naming the file."""
    try:
        if Path(path).stat().st_size > MAX_YAML_BYTES:
            raise UserError(f"{path} is larger than {MAX_YAML_BYTES // 2**20} MiB: not a spec or runs file llmpar reads")
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    text = _decode(path, raw)
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"malformed YAML in {where}: {problem}") from None
    except (RecursionError, ValueError, OverflowError) as exc:   # e.g. absurd nesting, or a timestamp
        raise UserError(f"malformed YAML in {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a YAML mapping at the top level")
    if _expands_beyond(data, MAX_YAML_VALUES):
        raise UserError(f"{path}: its YAML aliases expand to more than {MAX_YAML_VALUES:,} values (an alias bomb?): "
                        "refused")
    return data


def validation_message(exc: ValidationError, source: str) -> str:
    """First validation error as one line: which field, why."""
    # pydantic puts its validator names into the location (a union member 'constrained-float',
    # 'function-after[...]', a type tag 'float' / 'str'): keep the field path a user wrote
    internal = {"int", "float", "str", "bool", "dict", "list", "none"}

    def where(e) -> str:
        parts = [str(p) for p in e.get("loc", ())
                 if not (isinstance(p, str) and ("-" in p or "[" in p or p in internal))]
        return ".".join(parts) or "(the whole file)"

    errors = exc.errors()
    err, loc = errors[0], where(errors[0])
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    msg = re.sub(r" or instance of \w+", "", msg)      # "a valid dictionary or instance of MoESpec"
    # a union field (a number or a per-generation mapping) fails once per member: count fields
    others = {where(e) for e in errors[1:]} - {loc}
    more = f" (and {len(others)} more field{'s' if len(others) > 1 else ''})" if others else ""
    return f"invalid spec {source}: field '{loc}': {msg}{more}"


def validate(cls: type[BaseModel], data: dict[str, Any], source: str):
    """``cls`` from a spec file's mapping, in pydantic's strict mode: a YAML ``true`` is not the
    integer 1 and a quoted "80" is not a number (unit strings such as ``80 GiB`` are parsed by the
    fields' own validators before the strict check). A mapping validated before is read back from
    the validated-spec cache (:mod:`llmpar.specs.cache`): same data, same code, same object."""
    from llmpar.specs import cache

    key = cache.key(cls, data)
    hit = cache.get(key)
    if hit is not None:
        return hit
    try:
        obj = cls.model_validate(data, strict=True)
    except ValidationError as exc:
        raise UserError(validation_message(exc, source)) from None
    cache.put(key, obj)
    return obj


@functools.lru_cache(maxsize=None)
def _index(kind: str) -> dict[str, tuple[str, Path]]:
    """name or alias -> (canonical name, file) for the shipped specs."""
    out: dict[str, tuple[str, Path]] = {}
    for path in sorted(data_dir(kind).glob("*.yaml")):
        data = read_yaml(path)
        name = str(data.get("name", path.stem))
        out[name] = (name, path)
        for alias in data.get("aliases", []) or []:
            out[str(alias)] = (name, path)
    return out


def _lookup(kind: str, key: str) -> tuple[str, Path] | None:
    """(canonical name, file) for a shipped name or alias typed in lower case, or None.

    A shipped spec's canonical name is its file's stem and no alias is another file's stem
    (tests/test_specs_cmd.py checks both), so a canonical name reads one file instead of
    parsing every shipped spec for its aliases (about 25 ms of `llmpar memory`'s start-up)."""
    path = data_dir(kind) / f"{key}.yaml"
    if key and path.is_file():
        return key, path
    return _index(kind).get(key)


def shipped_names(kind: str) -> list[str]:
    return sorted({canon for canon, _ in _index(kind).values()})


def _looks_like_path(name: str) -> bool:
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
    if _looks_like_path(name):
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
    found = _lookup(kind, name.lower())
    if found is None:
        raise UserError(f"unknown {what} {name!r}{suggest(name, _index(kind))}; see `{listing}`")
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


def _spec_validated(cls: type[BaseModel], data: dict[str, Any], source: str):
    """A hardware profile or stack from its merged mapping: ``aliases`` (a registry key, not a
    field of the class) must be a list of names, then the rest is validated strictly."""
    aliases = data.pop("aliases", None)
    if aliases is not None and not (isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)):
        raise UserError(f"invalid spec {source}: field 'aliases': expected a list of names, got {aliases!r}")
    return validate(cls, data, source)


def load_hardware(name: str) -> Hardware:
    """A shipped profile by name (``h100-sxm``) or a YAML path, with ``extends:`` resolved."""
    if isinstance(name, Hardware):
        return name
    data, source = _hardware_dict(str(name))
    return _spec_validated(Hardware, data, source)


DEFAULT_STACK = "megatron-core"


@functools.lru_cache(maxsize=64)
def _load_stack_cached(name: str) -> Stack:
    data, source = _spec_dict("stacks", name)
    return _spec_validated(Stack, data, source)


def load_stack(name: str | Stack | None = None) -> Stack:
    """A shipped stack by name (``megatron-core``), a YAML path, or a loaded :class:`Stack`;
    ``None`` is the default stack (DEFAULT_STACK)."""
    if isinstance(name, Stack):
        return name
    name = DEFAULT_STACK if name is None else str(name)
    if _looks_like_path(name):   # a user file may change between calls: not cached
        data, source = _spec_dict("stacks", name)
        return _spec_validated(Stack, data, source)
    return _load_stack_cached(name.lower())


DEFAULT_ENGINE = "vllm"


def load_engine(name=None):
    """A shipped serving engine by name (``vllm``), a YAML path, or a loaded Engine; ``None`` is
    DEFAULT_ENGINE (docs/serving.md, Engines)."""
    from llmpar.specs.engine import Engine

    if isinstance(name, Engine):
        return name
    name = DEFAULT_ENGINE if name is None else str(name)
    data, source = _spec_dict("engines", name if _looks_like_path(name) else name.lower())
    return _spec_validated(Engine, data, source)


def load_model(name: str) -> ModelSpec:
    """A shipped model by name or alias (``llama-70b``), a YAML path, or a HF ``config.json``."""
    if isinstance(name, ModelSpec):
        return name
    name = str(name)
    if name.endswith(".json"):
        from llmpar.specs.hf import load_hf_config

        return load_hf_config(Path(name))
    if _looks_like_path(name):
        path = Path(name)
        if path.is_dir():
            raise UserError(f"model {name} is a folder, not a YAML file (a HF checkpoint folder: --hf its config.json)")
        if path.exists() and not path.is_file():
            raise UserError(f"model {name} is not a regular file")
        if not path.is_file():
            raise UserError(f"model file not found: {name}")
        data = read_yaml(path)
        if "extends" in data:
            data = _model_extended(str(path))
        data.setdefault("name", path.stem)
        return validate(ModelSpec, data, str(path))
    key = name.lower()
    found = _lookup("models", key)
    if found is None:
        raise UserError(f"unknown model {name!r}{suggest(key, _index('models'))}; see `llmpar models`")
    _canon, path = found
    data = read_yaml(path)
    if "extends" in data:
        data = _model_extended(str(path))
    return validate(ModelSpec, data, str(path))


def _model_extended(path: str) -> dict[str, Any]:
    """A model YAML with ``extends: BASE`` (a shipped model or a path): the base's shapes merged
    under the file's own keys; the base's name, aliases, description and source are not inherited."""
    data, _ = _spec_dict("models", path)
    data.pop("extends", None)
    return data


def resolved_name(name: str, kind: str = "models") -> tuple[str, str | None]:
    """(canonical name, alias typed or None) — so output can show 'llama-70b -> llama-3-70b'."""
    key = str(name).lower()
    found = _lookup(kind, key)
    if found is not None and found[0] != key:
        return found[0], key
    return (found[0] if found is not None else str(name)), None
