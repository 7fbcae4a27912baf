"""Reading spec files, below the loaders (registry.py) and the HF config reader (hf.py), which both
use it: where the shipped data live, the bounded duplicate-refusing YAML and JSON readers, and
strict pydantic validation through the validated-spec cache (docs/architecture.md, Data files)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from llmpar.errors import UserError


def data_dir(kind: str) -> Path:
    """Folder holding the shipped ``kind`` ('hardware', 'models', 'stacks', 'engines' or 'validation') YAML files."""
    # A source checkout (editable install) reads the repository folder first: hatch's editable
    # install copies force-included data once, at install time, so that copy goes stale.
    repo = Path(__file__).resolve().parents[3] / kind
    if repo.is_dir() and (repo.parent / "pyproject.toml").is_file():
        return repo
    # a wheel installs its data beside the package (pyproject.toml force-include llmpar/data/KIND);
    # importlib.resources (~5 ms to import) is only needed where the package is not a folder (a zip)
    beside = Path(__file__).resolve().parents[1] / "data" / kind
    if beside.is_dir():
        return beside
    try:
        from importlib import resources

        packaged = resources.files("llmpar").joinpath("data").joinpath(kind)
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError, TypeError):  # editable installs
        pass
    repo = Path(__file__).resolve().parents[3] / kind
    if repo.is_dir():
        return repo
    raise UserError(f"llmpar's shipped {kind}/ folder is missing (broken install?)")


class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """SafeLoader that refuses a mapping with the same key twice (PyYAML keeps the last one
    silently, so a duplicated ``memory:`` line would override the first without a word). Built on
    libyaml's parser where PyYAML has it (about 10x faster than the pure-Python one: reading every
    shipped spec for the name index was most of `llmpar memory`'s start-up)."""


def _construct_unique_mapping(loader: UniqueKeyLoader, node, deep: bool = False):
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


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)

# Numbers as YAML 1.2's core schema reads them, not YAML 1.1's (reliability review, items 20 and
# 36): `3e9` and `5e-1` are floats (1.1 wants a dot and reads them as text, which a float field
# then refused as "not a valid number"); `010` is ten (1.1: octal eight); `1:30` is text (1.1:
# sexagesimal ninety), so a field expecting a number says so. Underscores between digits stay
# allowed; 0o17 and 0x1f are the octal and hex forms.
_INT = r"^(?:[-+]?[0-9][0-9_]*|0o[0-7_]+|0x[0-9a-fA-F_]+)$"
_FLOAT = r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
UniqueKeyLoader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
UniqueKeyLoader.add_implicit_resolver(_INT_TAG, re.compile(_INT), list("-+0123456789"))
UniqueKeyLoader.add_implicit_resolver(_FLOAT_TAG, re.compile(_FLOAT), list("-+0123456789."))


class DuplicateKeyError(ValueError):
    """A JSON object that gives a key twice (:func:`unique_json_pairs`)."""


def unique_json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json ``object_pairs_hook``: a key given twice is refused (json keeps the last one silently),
    as the YAML readers refuse it (:class:`UniqueKeyLoader`); used by the runs tables' JSON and
    the HF config.json reader."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(f"duplicate key {k!r}")
        out[k] = v
    return out


class JSONReadError(UserError):
    """A text that :func:`loads_json` could not read (a UserError whose message names the place)."""


def loads_json(text: str, where: str, what: str = "JSON", *, line: int | None = None) -> Any:
    """The one JSON reader behind every JSON input (HF config.json, nccl-tests -J, runs tables,
    serving benchmark results): a key given twice is refused (:func:`unique_json_pairs`), nesting
    deep enough to exhaust the C decoder's recursion is one error, not a traceback, and every
    failure is one :class:`JSONReadError` '<where>:<line>: <malformed|truncated> <what>: <reason>'.
    ``line``: the line ``text`` starts on in its file (a JSON-lines record); otherwise the decoder's
    own line. ``Infinity`` and ``NaN`` read as floats (vLLM writes a request rate of inf as
    ``Infinity``): each reader's own checks then name the field that holds one."""
    import json

    def at(lineno: int | None) -> str:
        n = line if line is not None else lineno
        return f"{where}:{n}" if n is not None else where

    try:
        return json.loads(text, object_pairs_hook=unique_json_pairs)
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated")
        raise JSONReadError(f"{at(exc.lineno)}: {'truncated' if at_end else 'malformed'} {what}: {exc.msg} "
                            f"(column {exc.colno})") from None
    except DuplicateKeyError as exc:
        raise JSONReadError(f"{at(None)}: {what}: {exc}") from None
    except RecursionError:   # the C decoder recurses once per nesting level
        raise JSONReadError(f"{at(None)}: {what} nested too deeply") from None
    except ValueError as exc:   # an integer of more than 4,300 digits (Python's int-from-text limit)
        raise JSONReadError(f"{at(None)}: malformed {what}: a number too long to read ({exc})") from None


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


UniqueKeyLoader.add_constructor(_INT_TAG, _construct_int)
UniqueKeyLoader.add_constructor(_FLOAT_TAG, _construct_float)


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


def expands_beyond(data: Any, limit: int) -> bool:
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


SHIPPED_KINDS = ("validation", "stacks", "hardware", "models", "engines")


def shipped_files_state(kinds=SHIPPED_KINDS) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of every shipped data file of ``kinds`` (subfolders included): the key
    under which a process keeps a result computed from them (``validate``, ``validate --serving``),
    so that an edited, added or removed file is a different key."""
    out = []
    for kind in kinds:
        for f in sorted(data_dir(kind).rglob("*")):
            if f.is_file():
                st = f.stat()
                out.append((str(f), st.st_mtime_ns, st.st_size))
    return tuple(out)


# Parsed mappings of small files, by their bytes: a spec is parsed once per process while its
# contents are the same (`validate --serving` loaded the same hardware and model files 2,482 times,
# 1.2 s of its 2 s). Keyed by content, not by modification time (which is coarser than a quick
# rewrite); each caller gets a deep copy, so no caller's change reaches another. Bounded in entries
# and in the size of a file kept.
_PARSED: dict[bytes, dict[str, Any]] = {}
_PARSED_MAX_ENTRIES = 256
_PARSED_MAX_BYTES = 256 << 10      # spec files are a few KiB; at most 64 MiB held


READ_FILES: set[str] = set()
"""Every spec or runs file this process has read (real paths): :mod:`llmpar.outputs` refuses to write
over any of them, whichever option named it or whichever ``extends:`` chain or runs table led to it."""


def note_read(path) -> None:
    """Record ``path`` as read by this process (:data:`READ_FILES`)."""
    import os

    try:
        READ_FILES.add(os.path.realpath(path))
    except (OSError, ValueError):
        pass


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping; malformed YAML (including a duplicated key or bytes that are not
    UTF-8), a file beyond MAX_YAML_BYTES or one whose aliases expand beyond MAX_YAML_VALUES is one
    line naming the file. Parsed once per process while the file's bytes are the same (a copy goes out)."""
    import copy

    try:
        if Path(path).stat().st_size > MAX_YAML_BYTES:
            raise UserError(f"{path} is larger than {MAX_YAML_BYTES // 2**20} MiB: not a spec or runs file llmpar reads")
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    note_read(path)
    hit = _PARSED.get(raw)
    if hit is not None:
        return copy.deepcopy(hit)
    data = _parse_yaml(path, raw)
    if len(raw) <= _PARSED_MAX_BYTES:
        if len(_PARSED) >= _PARSED_MAX_ENTRIES:
            _PARSED.clear()
        _PARSED[raw] = copy.deepcopy(data)
    return data


def _parse_yaml(path: Path, raw: bytes) -> dict[str, Any]:
    """The mapping in ``raw`` (the bytes of ``path``), each way it can be refused one line naming the file."""
    text = _decode(path, raw)
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"malformed YAML in {where}: {problem}") from None
    except (RecursionError, ValueError, OverflowError) as exc:   # e.g. absurd nesting, or a timestamp
        raise UserError(f"malformed YAML in {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a YAML mapping at the top level")
    if expands_beyond(data, MAX_YAML_VALUES):
        raise UserError(f"{path}: its YAML aliases expand to more than {MAX_YAML_VALUES:,} values (an alias bomb?): "
                        "refused")
    return data


# pydantic puts its validator names into the location (a union member 'constrained-float',
# 'function-after[...]', a type tag 'float' / 'str'): keep the field path a user wrote
_INTERNAL = {"int", "float", "str", "bool", "dict", "list", "none"}


def field_path(e) -> list:
    """The field path of one pydantic error as the user wrote it (keys and list indices)."""
    return [p for p in e.get("loc", ()) if not (isinstance(p, str) and ("-" in p or "[" in p or p in _INTERNAL))]


def holder(chain: list, loc: list):
    """The file of an ``extends:`` chain (child first) whose own YAML sets the field at ``loc``:
    the child-most file that has the key (a child's value overrides its base's); None if none
    does (a list merged item by item, or a default)."""
    for path in chain:
        try:
            node: Any = read_yaml(path)
        except Exception:   # noqa: BLE001 - an unreadable base is named by its own error elsewhere
            return None
        found = bool(loc)
        for part in loc:
            if isinstance(part, str) and isinstance(node, dict) and part in node:
                node = node[part]
            else:
                found = False
                break
        if found:
            return path
    return None


def validation_message(exc: ValidationError, source: str, chain=None) -> str:
    """First validation error as one line: which field, why. ``chain``: a callable giving the
    ``extends:`` chain (child first); a value inherited from a base file is named in that file
    (reliability re-check: the error named the file given, not the base that held the .inf)."""
    def where(e) -> str:
        return ".".join(str(p) for p in field_path(e)) or "(the whole file)"

    errors = exc.errors()
    err, loc = errors[0], where(errors[0])
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    msg = re.sub(r" or instance of \w+", "", msg)      # "a valid dictionary or instance of MoESpec"
    value = err.get("input")
    if err.get("type") == "int_type" and isinstance(value, float) and value.is_integer():
        # YAML reads 1.28e+5 or 3e1 as a float: say so and give the integer (reliability review, item 20)
        msg = (f"a float where an integer is needed (YAML reads e-notation such as 1.28e+5 as a float): "
               f"write {int(value)}")
    # a union field (a number or a per-generation mapping) fails once per member: count fields
    others = {where(e) for e in errors[1:]} - {loc}
    more = f" (and {len(others)} more field{'s' if len(others) > 1 else ''})" if others else ""
    if chain is not None:
        files = chain()
        held = holder(files, field_path(err)) if len(files) > 1 else None
        if held is not None and str(held) != str(files[0]):
            source = f"{held} (extended by {source})"
    return f"invalid spec {source}: field '{loc}': {msg}{more}"


def validate(cls: type[BaseModel], data: dict[str, Any], source: str, chain=None):
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
        raise UserError(validation_message(exc, source, chain)) from None
    cache.put(key, obj)
    return obj
