"""Time collectives with ``torch.distributed`` and write the results as nccl-tests would.

Run on every rank under torchrun (the ``bench`` extra: ``pip install 'llmpar[bench]'``)::

    torchrun --nproc-per-node 8 [--nnodes N --rdzv-endpoint HOST:PORT ...] \\
        -m llmpar.calibrate.bench --sizes 1KiB:1GiB --out results/

or let ``llmpar calibrate bench --launch --nproc 2`` start torchrun on this machine.

What is measured, per collective and size (definitions of github:NVIDIA/nccl-tests):
- ``size`` is what nccl-tests prints: max(send, receive) bytes per rank, so for all_gather,
  reduce_scatter and all_to_all it is the whole gathered array (``count x typesize x ranks``,
  ``count`` = elements per rank piece), for the others the buffer (``count x typesize``);
- time: ``warmup`` untimed calls, a barrier, then ``iters`` calls between two device
  synchronisations (CUDA: ``torch.cuda.synchronize``; gloo calls complete on return), divided by
  ``iters`` and averaged over ranks (nccl-tests' default ``-a``);
- algbw = size / time; busbw = algbw x :func:`llmpar.calibrate.nccl_tests.busbw_factor`;
- #wrong: one extra call on known data after the timing, elements that differ, summed over ranks.

Out-of-place and in-place follow what torch.distributed offers: all_reduce, broadcast and reduce
are in-place only (their out-of-place block is written blank, as nccl-tests does for a block it
does not run); all_to_all and send_recv are out-of-place only; all_gather and reduce_scatter have
both (in place = the rank's own piece of the big buffer). Which collectives the backend supports
is probed at run time (gloo's set differs between torch versions); the rest are skipped with a
note. Rank 0 writes ``<program>.txt`` per collective in the nccl-tests text layout (so
``llmpar calibrate parse`` reads it unchanged) and ``bench.json`` with everything.

The torch.distributed calls of one collective (buffers, call, data check) and the probe of what the
backend runs are in :mod:`llmpar.calibrate.bench_ops`.

torch is imported inside functions only. :func:`run` computes and returns a result (no printing);
:func:`main` is the torchrun entry point and the only place here that prints (a rich progress bar
and a summary, on rank 0).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from llmpar.calibrate.bench_ops import CollectiveOp, mean_over_ranks, probe, sum_over_ranks, sync
from llmpar.calibrate.nccl_tests import (
    GATHERED,
    PROGRAMS,
    Device,
    Measurement,
    ParsedLog,
    Row,
    busbw_factor,
    normalize_collective,
    to_text,
)
from llmpar.errors import UserError
from llmpar.units import parse_bytes

DEFAULT_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
BENCH_COLLECTIVES = DEFAULT_COLLECTIVES + ("reduce",)
DTYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double"}
PROGRAM_OF = {c: p for p, c in PROGRAMS.items()}


def parse_sizes(spec: str) -> list[int]:
    """``1KiB:64MiB`` (x2 steps), ``1KiB:64MiB:4`` (x4 steps) or ``4KiB,1MiB,64MiB``."""
    spec = str(spec).strip()
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise UserError(f"cannot read --sizes {spec!r}: expected MIN:MAX[:FACTOR], e.g. 1KiB:64MiB")
        lo, hi = (int(parse_bytes(p, "--sizes value")) for p in parts[:2])
        factor = 2
        if len(parts) == 3:
            try:
                factor = int(parts[2])
            except ValueError:
                factor = 0
            if factor < 2:
                raise UserError(f"--sizes step factor must be an integer >= 2, got {parts[2]!r}")
        if lo > hi:
            raise UserError(f"--sizes {spec!r}: minimum {lo} B is above maximum {hi} B")
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= factor
        return _at_least_one_element(out, spec)
    sizes = sorted({int(parse_bytes(p, "--sizes value")) for p in spec.split(",") if p.strip()})
    if not sizes:
        raise UserError(f"cannot read --sizes {spec!r}")
    return _at_least_one_element(sizes, spec)


def _at_least_one_element(sizes: list[int], spec: str) -> list[int]:
    """A size below one 8-byte element (the widest --dtype) times nothing (reliability review,
    item 24: --sizes 3B wrote a log without rows and said nothing)."""
    small = [s for s in sizes if s < 8]
    if small:
        raise UserError(f"--sizes {spec}: {small[0]} B is below one element of the widest dtype (8 B): nothing to time")
    return sizes


def parse_collectives(names: str | list[str] | tuple[str, ...] | None) -> list[str]:
    if names is None or (isinstance(names, (list, tuple)) and not names):
        return list(DEFAULT_COLLECTIVES)      # not given: the default set
    items = names.split(",") if isinstance(names, str) else [x for n in names for x in str(n).split(",")]
    if not any(item.strip() for item in items):
        # reliability review, item 24: --collectives "" silently ran the default set
        raise UserError("--collectives is empty: name at least one (e.g. all_reduce), or leave it out for the default set")
    out = []
    for item in items:
        if not item.strip():
            continue
        name = normalize_collective(item)
        if name not in BENCH_COLLECTIVES:
            raise UserError(f"`calibrate bench` cannot time {name}; it times {', '.join(BENCH_COLLECTIVES)}")
        if name not in out:
            out.append(name)
    return out


@dataclass
class BenchConfig:
    sizes: list[int]
    collectives: list[str] = field(default_factory=lambda: list(DEFAULT_COLLECTIVES))
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"
    check: bool = True


def free_port() -> int:
    """A TCP port free on the loopback interface right now (for the rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- timing

def run(cfg: BenchConfig, progress: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Benchmark on this rank (inside an initialised process group). Every rank returns the result."""
    import torch
    import torch.distributed as dist

    n, rank = dist.get_world_size(), dist.get_rank()
    backend = dist.get_backend()
    if backend == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    if cfg.dtype not in DTYPES:
        raise UserError(f"unknown --dtype {cfg.dtype!r}; known: {', '.join(DTYPES)}")
    dtype = getattr(torch, cfg.dtype)

    ok, skipped = probe(cfg.collectives, dtype, device)
    devices = _devices(rank, n, device)
    results: dict[str, list[Row]] = {}
    for coll in cfg.collectives:
        if coll not in ok:
            continue
        results[coll] = _time_rows(cfg, coll, ok[coll], dtype, device, progress)
    hosts = list(dict.fromkeys(d.host for d in devices))
    return {
        "backend": backend,
        "torch_version": torch.__version__,
        "ranks": n,
        "nodes": len(hosts),
        "hosts": hosts,
        "gpu": devices[0].name if devices else None,
        "dtype": cfg.dtype,
        "iters": cfg.iters,
        "warmup": cfg.warmup,
        "sizes_bytes": list(cfg.sizes),
        "devices": devices,
        "results": results,
        "skipped": skipped,
    }


def _devices(rank: int, n: int, device) -> list[Device]:
    """Every rank's host, process, device and GPU name, gathered from all ranks."""
    import torch
    import torch.distributed as dist

    host = socket.gethostname()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name = props.name
        bus = f"{getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:{getattr(props, 'pci_device_id', 0):02x}"
        local = device.index
    else:
        name, bus = f"CPU {platform.machine()}", "cpu"
        local = int(os.environ.get("LOCAL_RANK", 0))
    mine = (rank, host, os.getpid(), local, name, bus)
    everyone: list[Any] = [None] * n
    dist.all_gather_object(everyone, mine)
    return [Device(rank=e[0], host=e[1], pid=e[2], device=e[3], name=e[4], bus=e[5]) for e in everyone]


def _time_rows(cfg: BenchConfig, coll: str, blocks_run: tuple[str, ...], dtype, device,
               progress: Callable[[str, int], None] | None) -> list[Row]:
    """One row per size of one collective, each block the backend runs timed (nccl-tests' layout)."""
    import torch
    import torch.distributed as dist

    n, rank = dist.get_world_size(), dist.get_rank()
    ts = torch.tensor([], dtype=dtype).element_size()
    rows = []
    for size in cfg.sizes:
        count = size // (ts * n) if coll in GATHERED else size // ts
        if count == 0:
            if progress:
                progress(coll, size)
            continue
        nbytes = count * ts * (n if coll in GATHERED else 1)
        op = CollectiveOp(coll, count, n, rank, dtype, device)
        blocks: dict[str, Measurement] = {}
        for block in blocks_run:
            blocks[block] = _time_block(cfg, op, block, nbytes, device)
        rows.append(Row(size_bytes=nbytes, count=count, type=DTYPES[cfg.dtype],
                        redop="sum" if coll in ("all_reduce", "reduce_scatter", "reduce", "send_recv") else "none",
                        root=0 if coll in ("broadcast", "reduce") else -1,
                        out_of_place=blocks.get("out_of_place"), in_place=blocks.get("in_place"),
                        flagged=bool(any(m.wrong for m in blocks.values()))))
        if progress:
            progress(coll, size)
    return rows


def _time_block(cfg: BenchConfig, op: CollectiveOp, block: str, nbytes: int, device) -> Measurement:
    """``warmup`` untimed calls, a barrier, ``iters`` timed ones (mean over ranks), then the data check."""
    import torch.distributed as dist

    fn = op.call(block)
    for _ in range(cfg.warmup):
        fn()
    sync(device)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(cfg.iters):
        fn()
    sync(device)
    dt = mean_over_ranks((time.perf_counter() - t0) / cfg.iters, device)
    algbw = nbytes / dt / 1e9
    wrong = sum_over_ranks(op.check(block), device) if cfg.check else None
    return Measurement(time_us=dt * 1e6, algbw_GBps=algbw,
                       busbw_GBps=algbw * float(busbw_factor(op.coll, op.n)), wrong=wrong)


def to_logs(result: dict[str, Any]) -> dict[str, ParsedLog]:
    """One :class:`ParsedLog` per collective, ready for :func:`llmpar.calibrate.nccl_tests.to_text`."""
    out = {}
    for coll, rows in result["results"].items():
        out[coll] = ParsedLog(file=f"{PROGRAM_OF[coll]}.txt", collective=coll, ranks=result["ranks"],
                              nodes=result["nodes"], gpu=result["gpu"], rows=rows, hosts=result["hosts"],
                              devices=result["devices"])
    return out


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: v for k, v in result.items() if k not in ("devices", "results")},
        "results": [
            {"collective": coll, "program": PROGRAM_OF[coll], **r.to_dict()}
            for coll, rows in result["results"].items() for r in rows
        ],
    }


def write(result: dict[str, Any], out_dir: str | Path, cfg: BenchConfig) -> list[Path]:
    """Rank 0: ``<program>.txt`` per collective (nccl-tests layout) and ``bench.json``."""
    from llmpar.outputs import refuse_read

    out = Path(out_dir)
    names = [log.file for log in to_logs(result).values()] + ["bench.json"]
    for name in names:            # never over a file the command read (llmpar.outputs)
        refuse_read(out / name)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    config_line = (f"nThread 1 nGpus 1 minBytes {min(cfg.sizes)} maxBytes {max(cfg.sizes)} step: "
                   f"{'list' if len(cfg.sizes) < 2 else cfg.sizes[1] // cfg.sizes[0]}(factor) warmup iters: {cfg.warmup} "
                   f"iters: {cfg.iters} agg iters: 1 validation: {int(cfg.check)} graph: 0")
    preamble = [f"llmpar calibrate bench: torch {result['torch_version']}, torch.distributed backend {result['backend']}, "
                f"dtype {cfg.dtype}"]
    from llmpar.outputs import write_text   # temp file + rename, as every writer of llmpar

    for coll, log in to_logs(result).items():
        written.append(write_text(out / log.file, to_text(log, program=PROGRAM_OF[coll], config_line=config_line,
                                                        preamble=preamble)))
    written.append(write_text(out / "bench.json", json.dumps(to_json(result), indent=2) + "\n"))
    return written


# ----------------------------------------------------------------------------- entry point

def _argparser():
    import argparse

    ap = argparse.ArgumentParser(prog="python -m llmpar.calibrate.bench",
                                 description="Time collectives with torch.distributed (run under torchrun).")
    ap.add_argument("--sizes", default="1KiB:64MiB", help="MIN:MAX[:FACTOR] or a list (default 1KiB:64MiB)")
    ap.add_argument("--collectives", default=",".join(DEFAULT_COLLECTIVES), help="comma-separated")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--backend", default=None, choices=["nccl", "gloo"], help="default: nccl with CUDA, else gloo")
    ap.add_argument("--out", default="llmpar-bench", help="folder for the logs (rank 0 writes)")
    ap.add_argument("--no-check", action="store_true", help="skip the #wrong data check")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a stuck collective fails")
    return ap


def config_from_args(args) -> BenchConfig:
    if args.iters < 1 or args.warmup < 0:
        raise UserError("--iters must be >= 1 and --warmup >= 0")
    return BenchConfig(sizes=parse_sizes(args.sizes), collectives=parse_collectives(args.collectives),
                       iters=args.iters, warmup=args.warmup, dtype=args.dtype, check=not args.no_check)


def main(argv: list[str] | None = None) -> int:
    """torchrun entry point. Exit 0 on success, 2 on bad input (one line on stderr)."""
    args = _argparser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise UserError("not started by torchrun (RANK/WORLD_SIZE unset): run `torchrun --nproc-per-node G "
                            "-m llmpar.calibrate.bench ...` or `llmpar calibrate bench --launch --nproc G`")
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise UserError("calibrate bench needs torch: pip install 'llmpar[bench]'") from None
        backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl" and not torch.cuda.is_available():
            raise UserError("--backend nccl needs CUDA GPUs; this machine has none (use gloo)")
        if backend == "gloo" and os.environ.get("MASTER_ADDR", "") in ("127.0.0.1", "localhost"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    except UserError as exc:
        print(f"llmpar: error: {exc}", file=sys.stderr)
        return 2
    import datetime

    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    try:
        if rank == 0:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(stderr=True)
            total = len(cfg.collectives) * len(cfg.sizes)
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=not console.is_terminal) as bar:
                task = bar.add_task(f"{backend} x{dist.get_world_size()}", total=total)

                def tick(coll: str, size: int) -> None:
                    bar.update(task, advance=1, description=f"{coll} {size} B")
                result = run(cfg, progress=tick)
                bar.update(task, completed=total)
            written = write(result, args.out, cfg)
            for key, why in result["skipped"].items():
                console.print(f"skipped {key}: {why}")
            console.print(f"wrote {', '.join(str(p) for p in written)}")
        else:
            run(cfg)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through torchrun in tests
    sys.exit(main())
