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
#: which blocks torch.distributed can run for each collective
BLOCKS = {
    "all_reduce": ("in_place",),
    "broadcast": ("in_place",),
    "reduce": ("in_place",),
    "all_gather": ("out_of_place", "in_place"),
    "reduce_scatter": ("out_of_place", "in_place"),
    "all_to_all": ("out_of_place",),
    "send_recv": ("out_of_place",),
}
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


# ----------------------------------------------------------------------------- one collective

class _Op:
    """Buffers and calls for one collective at one per-rank element count."""

    def __init__(self, coll: str, count: int, n: int, rank: int, dtype, device):
        import torch

        self.coll, self.count, self.n, self.rank = coll, count, n, rank
        self.torch = torch
        big = count * n
        mk = lambda k: torch.zeros(k, dtype=dtype, device=device)  # noqa: E731
        if coll in ("all_reduce", "broadcast", "reduce"):
            self.buf = mk(count)
        elif coll == "all_gather":
            self.inp, self.out = mk(count), mk(big)
        elif coll == "reduce_scatter":
            self.inp, self.out = mk(big), mk(count)
        elif coll == "all_to_all":
            self.inp, self.out = mk(big), mk(big)
        elif coll == "send_recv":
            self.inp, self.out = mk(count), mk(count)

    def call(self, block: str) -> Callable[[], None]:
        import torch.distributed as dist

        c, r, k = self.coll, self.rank, self.count
        ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        if c == "all_reduce":
            return lambda: dist.all_reduce(self.buf)
        if c == "broadcast":
            return lambda: dist.broadcast(self.buf, src=0)
        if c == "reduce":
            return lambda: dist.reduce(self.buf, dst=0)
        if c == "all_gather":
            if block == "in_place":
                own = self.out.narrow(0, r * k, k)
                return lambda: ag(self.out, own)
            return lambda: ag(self.out, self.inp)
        if c == "reduce_scatter":
            if block == "in_place":
                own = self.inp.narrow(0, r * k, k)
                return lambda: rs(own, self.inp)
            return lambda: rs(self.out, self.inp)
        if c == "all_to_all":
            return lambda: dist.all_to_all_single(self.out, self.inp)
        if c == "send_recv":
            nxt, prv = (r + 1) % self.n, (r - 1) % self.n

            def sendrecv():
                ops = [dist.P2POp(dist.isend, self.inp, nxt), dist.P2POp(dist.irecv, self.out, prv)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
            return sendrecv
        raise ValueError(c)

    def check(self, block: str) -> int:
        """Run once on known data; elements that differ from the expected result on this rank."""
        torch, n, r, k = self.torch, self.n, self.rank, self.count
        c = self.coll
        total = n * (n + 1) / 2
        if c in ("all_reduce", "broadcast", "reduce"):
            self.buf.fill_(r + 1)
            self.call(block)()
            got, want = self.buf, {"all_reduce": total, "broadcast": 1.0, "reduce": total}[c]
            if c == "reduce" and r != 0:
                return 0
        elif c == "all_gather":
            src = self.out.narrow(0, r * k, k) if block == "in_place" else self.inp
            self.out.fill_(-1)
            src.fill_(r + 1)
            self.call(block)()
            got = self.out
            want = torch.arange(1, n + 1, dtype=got.dtype, device=got.device).repeat_interleave(k)
        elif c == "reduce_scatter":
            self.inp.fill_(r + 1)
            self.call(block)()
            got = self.inp.narrow(0, r * k, k) if block == "in_place" else self.out
            want = total
        elif c == "all_to_all":
            self.inp.copy_((r * n + torch.arange(n, device=self.inp.device)).repeat_interleave(k).to(self.inp.dtype))
            self.call(block)()
            got = self.out
            want = (torch.arange(n, device=got.device) * n + r).repeat_interleave(k).to(got.dtype)
        else:  # send_recv
            self.inp.fill_(r + 1)
            self.out.fill_(-1)
            self.call(block)()
            got, want = self.out, float((r - 1) % n + 1)
        want_t = want if isinstance(want, torch.Tensor) else torch.full_like(got, want)
        tol = 0.0 if got.dtype in (torch.float32, torch.float64) else 1e-2
        bad = (got.float() - want_t.float()).abs() > tol * want_t.float().abs()
        return int(bad.sum().item())


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mean_over_ranks(value: float, device) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def _sum_over_ranks(value: int, device) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return int(t.item())


def probe(collectives: list[str], dtype, device) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """Which (collective, block) pairs this backend runs: try each once on a tiny buffer.

    Every rank runs the same backend and code, so an unsupported call fails on every rank alike.
    """
    import torch.distributed as dist

    n, r = dist.get_world_size(), dist.get_rank()
    ok: dict[str, tuple[str, ...]] = {}
    skipped: dict[str, str] = {}
    for coll in collectives:
        if coll == "send_recv" and n < 2:
            skipped[coll] = "send_recv needs at least 2 ranks"
            continue
        blocks = []
        reasons = []
        for block in BLOCKS[coll]:
            try:
                op = _Op(coll, 4, n, r, dtype, device)
                op.call(block)()
                _sync(device)
                blocks.append(block)
            except (RuntimeError, NotImplementedError, ValueError, AttributeError, TypeError) as exc:
                reasons.append(f"{block}: {type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}")
        dist.barrier()
        if blocks:
            ok[coll] = tuple(blocks)
            if reasons:
                skipped[f"{coll}.{'/'.join(b for b in BLOCKS[coll] if b not in blocks)}"] = "; ".join(reasons)
        else:
            skipped[coll] = f"not supported by backend {dist.get_backend()}: " + "; ".join(reasons)
    return ok, skipped


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
    ts = torch.tensor([], dtype=dtype).element_size()
    type_name = DTYPES[cfg.dtype]

    ok, skipped = probe(cfg.collectives, dtype, device)
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
    devices = [Device(rank=e[0], host=e[1], pid=e[2], device=e[3], name=e[4], bus=e[5]) for e in everyone]

    results: dict[str, list[Row]] = {}
    for coll in cfg.collectives:
        if coll not in ok:
            continue
        rows = []
        for size in cfg.sizes:
            count = size // (ts * n) if coll in GATHERED else size // ts
            if count == 0:
                if progress:
                    progress(coll, size)
                continue
            nbytes = count * ts * (n if coll in GATHERED else 1)
            op = _Op(coll, count, n, rank, dtype, device)
            blocks: dict[str, Measurement] = {}
            for block in ok[coll]:
                fn = op.call(block)
                for _ in range(cfg.warmup):
                    fn()
                _sync(device)
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(cfg.iters):
                    fn()
                _sync(device)
                dt = _mean_over_ranks((time.perf_counter() - t0) / cfg.iters, device)
                algbw = nbytes / dt / 1e9
                wrong = _sum_over_ranks(op.check(block), device) if cfg.check else None
                blocks[block] = Measurement(time_us=dt * 1e6, algbw_GBps=algbw,
                                            busbw_GBps=algbw * float(busbw_factor(coll, n)), wrong=wrong)
            rows.append(Row(size_bytes=nbytes, count=count, type=type_name,
                            redop="sum" if coll in ("all_reduce", "reduce_scatter", "reduce", "send_recv") else "none",
                            root=0 if coll in ("broadcast", "reduce") else -1,
                            out_of_place=blocks.get("out_of_place"), in_place=blocks.get("in_place"),
                            flagged=bool(any(m.wrong for m in blocks.values()))))
            if progress:
                progress(coll, size)
        results[coll] = rows
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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    config_line = (f"nThread 1 nGpus 1 minBytes {min(cfg.sizes)} maxBytes {max(cfg.sizes)} step: "
                   f"{'list' if len(cfg.sizes) < 2 else cfg.sizes[1] // cfg.sizes[0]}(factor) warmup iters: {cfg.warmup} "
                   f"iters: {cfg.iters} agg iters: 1 validation: {int(cfg.check)} graph: 0")
    preamble = [f"llmpar calibrate bench: torch {result['torch_version']}, torch.distributed backend {result['backend']}, "
                f"dtype {cfg.dtype}"]
    for coll, log in to_logs(result).items():
        p = out / log.file
        p.write_text(to_text(log, program=PROGRAM_OF[coll], config_line=config_line, preamble=preamble))
        written.append(p)
    p = out / "bench.json"
    p.write_text(json.dumps(to_json(result), indent=2) + "\n")
    written.append(p)
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
