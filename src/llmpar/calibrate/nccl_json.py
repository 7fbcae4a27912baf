"""nccl-tests ``-J FILE`` JSON (nccl-tests >= 2.17, version 3) -> a :class:`Section` (split from ``nccl_tests``)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from llmpar.calibrate.nccl_records import Device, Measurement, Row, Section, printable
from llmpar.errors import UserError


def _count(value, lo: int = 1) -> int:
    """A JSON count: an int (or a float with a whole value) of at least ``lo``; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")) or int(value) != value or value < lo:
        raise ValueError(value)
    return int(value)


def scan_json(text: str, file: str) -> list[tuple[Section, dict[str, Any]]]:
    from llmpar.specs.reading import loads_json   # the one JSON reader (a key given twice: item 31)

    data = loads_json(text, file, "JSON (nccl-tests -J output)")
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise UserError(f"{file}:1: JSON without a 'results' list: not nccl-tests -J output")
    sec = Section(json=True)
    args = data.get("args") or []
    if args and isinstance(args[0], str):
        sec.stated = printable(os.path.basename(args[0].replace("\\", "/")))
    cfg = data.get("config") or {}
    if not isinstance(cfg, dict):   # "config": "x" had been an AttributeError
        raise UserError(f"{file}:1: 'config' is not an object: not nccl-tests -J output")
    try:
        sec.nthread = _count(cfg.get("nthreads") or 1)
        sec.ngpus = _count(cfg.get("ngpus") or 1)
    except (TypeError, ValueError):
        raise UserError(f"{file}:1: config.nthreads / config.ngpus must be whole numbers of 1 or more") from None
    devices = cfg.get("devices") or []
    if not isinstance(devices, list):
        raise UserError(f"{file}:1: config.devices is not a list")
    for d in devices:
        try:
            sec.devices.append(Device(rank=int(d["rank"]), host=str(d.get("hostname", "")), device=int(d.get("device", 0)),
                                      name=str(d.get("device_info", "")).strip(), group=int(d.get("group", 0)),
                                      pid=d.get("pid"), bus=str(d.get("device_hex", ""))))
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{file}:1: config.devices has an entry without rank/hostname/device") from None
    v = data.get("nccl_version")
    if isinstance(v, int) and v > 0:
        sec.library["nccl"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 20900 else f"{v // 1000}.{v // 100 % 10}.{v % 100}"
    ab = data.get("average_bus_bandwidth")
    if isinstance(ab, dict) and isinstance(ab.get("bandwidth"), (int, float)):
        sec.avg_busbw = float(ab["bandwidth"])
        sec.footer = True
    oob = data.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        sec.oob = (oob["count"], "OK" if oob.get("okay") in (True, "true") else "FAILED")

    def block(obj, where) -> Measurement | None:
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise UserError(f"{file}:1: {where} is not an object")
        cputime = "cpu_time" in obj
        try:
            t = obj["cpu_time" if cputime else "time"]
            vals = [float(x) for x in (t, obj["alg_bw"], obj["bus_bw"])]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{file}:1: {where} lacks time/alg_bw/bus_bw numbers") from None
        if any(x < 0 for x in vals):
            raise UserError(f"{file}:1: {where} has a negative value")
        # nan / inf are kept as written: nccl_infer flags the row and says why
        nw = obj.get("nwrong")
        wrong = None if nw is None or nw == "nan" else float(nw)
        return Measurement(vals[0], vals[1], vals[2], wrong=wrong, cputime=cputime, resolution=(5e-7, 5e-7, 5e-7))

    for i, res in enumerate(data["results"]):
        where = f"results[{i}]"
        if not isinstance(res, dict):
            raise UserError(f"{file}:1: {where} is not an object")
        try:
            # whole numbers: int(16777216.5) had read a corrupted size as 16 MiB
            size, count = _count(res["size"], 0), _count(res["count"], 0)
            root_raw = str(res.get("root", "-1")).strip()
            root = int(root_raw) if root_raw else None
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{file}:1: {where} lacks integer size/count/root") from None
        sec.rows.append(Row(size_bytes=size, count=count, type=str(res.get("type", "")), redop=res.get("redop"),
                            root=root, out_of_place=block(res.get("out_of_place"), f"{where}.out_of_place"),
                            in_place=block(res.get("in_place"), f"{where}.in_place"), line=i))
    if not sec.rows:
        raise UserError(f"{file}:1: nccl-tests JSON with an empty 'results' list")
    return [(sec, {"labels": Counter(), "nlines": text.count("\n") + 1})]
