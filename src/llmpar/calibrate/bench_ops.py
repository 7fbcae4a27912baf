"""The torch.distributed calls behind ``calibrate bench`` (split from ``bench``).

:class:`CollectiveOp` holds the buffers of one collective at one per-rank element count, makes the
call for a block (out of place or in place, :data:`BLOCKS`: what torch.distributed offers) and runs
the data check (#wrong) on known values; :func:`probe` finds which (collective, block) pairs the
backend runs; :func:`sync`, :func:`mean_over_ranks` and :func:`sum_over_ranks` are the device
synchronisation and the averages over ranks that :func:`llmpar.calibrate.bench.run` times with
(definitions of github:NVIDIA/nccl-tests, as the module docstring of :mod:`llmpar.calibrate.bench`
says; docs/calibration.md, section 1).

torch is imported inside functions only. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable

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


class CollectiveOp:
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


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mean_over_ranks(value: float, device) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def sum_over_ranks(value: int, device) -> int:
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
                op = CollectiveOp(coll, 4, n, r, dtype, device)
                op.call(block)()
                sync(device)
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
