"""``llmpar calibrate``: read nccl-tests logs, time collectives and GEMMs on this cluster.

Subcommands: ``parse`` (nccl-tests / rccl-tests text and -J JSON), ``bench`` (torch.distributed,
under torchrun or ``--launch``), ``gemm`` (matmul efficiency -> a profile), ``fit`` (the collective
model's latency and bandwidth -> a profile) and ``check`` (the model against the measurements,
exit 1 beyond tolerance); fit and check take the :class:`llmpar.calibrate.nccl_tests.ParsedLog`
objects ``parse`` builds; those two commands are defined in :mod:`llmpar.cli.calibrate_fit_cmd`.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import click

from llmpar.cli.common import echo_json
from llmpar.errors import UserError
from llmpar.specs.registry import DEFAULT_HARDWARE


@click.group("calibrate")
def calibrate():
    """Parse nccl-tests logs, time collectives and GEMMs, fit the network model; fit a stack to runs."""


# ----------------------------------------------------------------------------- parse

def _cell(x: float) -> str:
    """A measured figure of a row: '-' where the log's own number is not finite (a flagged row)."""
    return f"{x:.2f}" if math.isfinite(x) else "-"


def _render_logs(logs, rows: int = 60) -> None:
    """Each log's facts and at most ``rows`` of its rows (a 30,000-row log had taken 14-30 s to draw;
    --json has every row)."""
    from llmpar.cli.render import console as make_console
    from rich.table import Table

    from llmpar.units import fmt_size

    console = make_console()
    for log in logs:
        where = log.file + (f" (table {log.section + 1})" if log.section else "")
        facts = [f"collective {log.collective or '?'}", f"{log.ranks or '?'} ranks", f"{log.nodes or '?'} nodes",
                 f"GPU {log.gpu or '?'}"]
        console.print(f"[bold]{where}[/bold]: " + ", ".join(facts) + f"  [dim]({log.format})[/dim]")
        for key, how in log.inferred.items():
            console.print(f"  inferred {key}: {how}")
        table = Table(show_edge=False, pad_edge=False)
        for col in ("size", "type", "oop time (us)", "oop algbw (GB/s)", "oop busbw (GB/s)",
                    "ip time (us)", "ip algbw (GB/s)", "ip busbw (GB/s)", "#wrong"):
            table.add_column(col, justify="right")
        for r in log.rows[:rows]:
            cells = [fmt_size(r.size_bytes), r.type]
            for m in (r.out_of_place, r.in_place):
                cells += ([_cell(m.time_us), _cell(m.algbw_GBps), _cell(m.busbw_GBps)] if m else ["-", "-", "-"])
            wrong = [m.wrong for m in r.blocks() if m.wrong is not None]
            errs = [m.max_error for m in r.blocks() if m.max_error is not None]
            mark = f"{max(wrong):g}" if wrong else (f"{max(errs):.0e}" if errs else "N/A")
            cells.append(f"[red]{mark} FLAGGED[/red]" if r.flagged else mark)
            table.add_row(*cells)
        console.print(table)
        if len(log.rows) > rows:
            console.print(f"  {len(log.rows) - rows:,} more rows not shown (--rows N shows more; --json has all)")
        for note in log.notes:
            console.print(f"  note: {note}")
        console.print()


@calibrate.command("parse")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--collective", help="Override the collective (all_reduce, all-gather, alltoall, ...).")
@click.option("--ranks", type=int, help="Override the rank count.")
@click.option("--nodes", type=int, help="Override the node count.")
@click.option("--gpu", help="Override the GPU model.")
@click.option("--rows", "show_rows", type=click.IntRange(1, 100_000), default=60, show_default=True,
              help="Rows of each log to list (the fit and --json use all).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def parse_cmd(logs, collective, ranks, nodes, gpu, show_rows, as_json):
    """Read nccl-tests / rccl-tests output (text or -J JSON): sizes, times, algbw, busbw.

    Collective, rank count, nodes and GPU come from the log where it states them, otherwise they
    are inferred from the rows (and the inference is reported); the options override both.
    Rows whose #wrong > 0 are flagged and not used by fit/check.
    """
    from llmpar.calibrate.nccl_tests import parse_files

    parsed = parse_files(logs, collective=collective, ranks=ranks, nodes=nodes, gpu=gpu)
    if as_json:
        if click.get_current_context().get_parameter_source("show_rows") == click.core.ParameterSource.COMMANDLINE:
            raise UserError("--rows lists rows in the table; --json has every row: drop --rows")
        echo_json({"files": [p.to_dict() for p in parsed]})
    else:
        _render_logs(parsed, show_rows)


# ----------------------------------------------------------------------------- bench

def _bench_argv(sizes, collectives, iters, warmup, dtype, backend, out, no_check, timeout) -> list[str]:
    argv = ["--sizes", sizes, "--iters", str(iters), "--warmup", str(warmup), "--dtype", dtype, "--out", str(out),
            "--timeout", str(timeout)]
    if collectives:
        argv += ["--collectives", ",".join(collectives)]
    if backend:
        argv += ["--backend", backend]
    if no_check:
        argv.append("--no-check")
    return argv


def _kill_group(proc) -> None:
    """Stop a process started with ``start_new_session`` and everything it started: SIGTERM to its
    process group, 5 s to finish, then SIGKILL to whatever of the group is left."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


@calibrate.command("bench")
@click.option("--launch", is_flag=True, help="Start torchrun on this machine (else: run as one torchrun worker).")
@click.option("--nproc", type=click.IntRange(1, 1024), default=2, show_default=True, help="Processes with --launch.")
@click.option("--sizes", default="1KiB:64MiB", show_default=True, help="MIN:MAX[:FACTOR] or a comma list.")
@click.option("--collectives", multiple=True, help="Comma list (default: all_reduce, all_gather, reduce_scatter, "
              "all_to_all, broadcast, send_recv; reduce on request).")
@click.option("--iters", type=click.IntRange(1), default=20, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16", "float64"]), default="float32", show_default=True)
@click.option("--backend", type=click.Choice(["nccl", "gloo"]), help="Default: nccl with CUDA GPUs, else gloo.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("llmpar-bench"), show_default=True,
              help="Folder for <program>.txt (nccl-tests layout) and bench.json.")
@click.option("--no-check", is_flag=True, help="Skip the #wrong data check.")
@click.option("--timeout", type=click.FloatRange(1), default=300.0, show_default=True, help="Seconds the measurements may take (the workers' deadline); with --launch torchrun's start-up gets 60 s more.")
@click.option("--json", "as_json", is_flag=True, help="Print bench.json when done.")
def bench_cmd(launch, nproc, sizes, collectives, iters, warmup, dtype, backend, out, no_check, timeout, as_json):
    """Time collectives with torch.distributed and write nccl-tests-layout logs.

    With --launch, starts `torchrun --nproc-per-node NPROC` on this machine (loopback rendezvous;
    gloo binds to lo on CPU). Without it, run it as a torchrun worker on each node:
    `torchrun --nproc-per-node 8 --nnodes N ... -m llmpar.calibrate.bench --sizes 1KiB:1GiB`.
    """
    from llmpar.calibrate import bench

    from llmpar.outputs import check_out_folder

    bench.parse_sizes(sizes)                       # bad input -> exit 2 before any process starts
    colls = bench.parse_collectives(list(collectives))
    check_out_folder(out)
    argv = _bench_argv(sizes, colls, iters, warmup, dtype, backend, out, no_check, timeout)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UserError("calibrate bench needs torch: pip install torch==2.13.0 && pip install 'llmpar[bench]'") from None
    if not launch:
        if "RANK" not in os.environ:
            raise UserError("not under torchrun: add --launch --nproc N, or run `torchrun ... -m llmpar.calibrate.bench`")
        rc = bench.main(argv)
        if rc:
            sys.exit(rc)
    else:
        port = bench.free_port()
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        import torch as _t

        if (backend or ("nccl" if _t.cuda.is_available() else "gloo")) == "gloo":
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
               "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "llmpar.calibrate.bench", *argv]
        # torchrun in its own session: on a timeout the whole group goes (torchrun and its workers);
        # killing torchrun alone left the workers running, orphaned
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise UserError(f"calibrate bench: torchrun did not finish within {timeout + 60:.0f} s "
                            f"(its workers were stopped)") from None
        if proc.returncode != 0:
            # torchrun ends its report with rules of '=' and '-': the culprit is the worker's own error
            # line (llmpar's, else the last exception's: an allocation of --sizes beyond the host's memory)
            lines = [ln.strip() for ln in (stderr or "").splitlines()
                     if ln.strip() and "Warning" not in ln and set(ln.strip()) - set("=-_ ")]
            err = next((ln for ln in lines if ln.startswith("llmpar: error:")),
                       next((ln for ln in reversed(lines) if "Error" in ln.split(":")[0]), lines[-1] if lines else ""))
            raise UserError(f"calibrate bench: torchrun exited with {proc.returncode}: {err.removeprefix('llmpar: error: ')}")
    result_path = Path(out) / "bench.json"
    if not result_path.is_file():
        raise UserError(f"calibrate bench: no {result_path} was written")
    data = json.loads(result_path.read_text())
    if as_json:
        echo_json(data)
        return
    from llmpar.cli.render import console as make_console

    console = make_console()
    console.print(f"{data['backend']} on {data['ranks']} ranks, {data['nodes']} node(s), {data['gpu']}; "
                  f"dtype {data['dtype']}, {data['iters']} iters after {data['warmup']} warm-up")
    by_coll: dict[str, list] = {}
    for r in data["results"]:
        by_coll.setdefault(r["collective"], []).append(r)
    for coll, rows in by_coll.items():
        best = max((m["busbw_GBps"] for r in rows for m in (r["out_of_place"], r["in_place"]) if m), default=0.0)
        console.print(f"  {coll:<15s} {len(rows)} sizes, best busbw {best:.3f} GB/s -> {Path(out) / (rows[0]['program'] + '.txt')}")
    for key, why in data.get("skipped", {}).items():
        console.print(f"  skipped {key}: {why}")


# ----------------------------------------------------------------------------- gemm

@calibrate.command("gemm")
@click.option("--hardware", default=DEFAULT_HARDWARE, show_default=True, help="Base profile (name or YAML path).")
@click.option("--model", default="llama-3-70b", show_default=True, help="Model whose GEMM shapes are measured.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the calibrated profile here.")
@click.option("--device", default="cuda", show_default=True, help="cuda, cuda:N, or cpu (tests the pipeline).")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32", "tf32"]), default="bf16", show_default=True)
@click.option("--tp", "tps", default="1,2,4,8", show_default=True, help="TP degrees the model's shapes are split by.")
@click.option("--tokens", default="2048,8192", show_default=True, help="Token counts (the GEMMs' m).")
@click.option("--square", default="256,512,1024,2048,4096,8192", show_default=True, help="Square sizes also measured.")
@click.option("--max-dim", type=click.IntRange(1), help="Skip shapes with a dimension above this (small devices).")
@click.option("--iters", type=click.IntRange(1), default=10, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=3, show_default=True)
@click.option("--peak", help="Peak FLOP/s to divide by (default: the profile's peak for --dtype).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def gemm_cmd(hardware, model, out, device, dtype, tps, tokens, square, max_dim, iters, warmup, peak, as_json):
    """Measure matmul TFLOP/s over a model's GEMM shapes and fit the profile's GEMM efficiency.

    Needs a GPU; without one it says so and exits 0 (use --device cpu to test the pipeline).
    """
    from llmpar.calibrate import gemm

    def ints(text, what):
        try:
            vals = [int(x) for x in str(text).split(",") if x.strip()]
        except ValueError:
            vals = []
        if not vals or min(vals) < 1:
            raise UserError(f"--{what} must be a comma list of positive integers, got {text!r}")
        return vals

    from llmpar.outputs import check_out, spec_inputs

    # before any measurement: never over an input (the hardware's chain, the model file's)
    check_out(out, inputs=spec_inputs(("models", model)), spec_kind="hardware", spec=hardware)
    plan = gemm.GemmPlan(hardware=hardware, model=model, dtype=dtype, tps=ints(tps, "tp"), tokens=ints(tokens, "tokens"),
                         square=ints(square, "square"), max_dim=max_dim, iters=iters, warmup=warmup, peak=peak)
    shapes = gemm.plan_shapes(plan)                # validates model/hardware before touching torch
    reason = gemm.device_unavailable(device)
    if reason:
        # nothing measured is not an error (the same command runs on the GPU machine later); with
        # --json stdout still carries a document saying so, and the shapes it would have timed
        click.echo(f"llmpar: {reason}", err=True)
        if as_json:
            echo_json({"measured": False, "reason": reason, "device": device, "dtype": dtype, "samples": [],
                       "planned": [{"label": sh.label, "m": sh.m, "n": sh.n, "k": sh.k} for sh in shapes],
                       "out": None})
        return
    result = gemm.calibrate(plan, shapes, device)
    if out:
        gemm.write_profile(result, out)
    if as_json:
        echo_json({"measured": True, **result.to_dict(), "out": str(out) if out else None})
        return
    from llmpar.cli.render import console as make_console
    from rich.table import Table

    console = make_console()
    d = result.to_dict()
    console.print(f"{d['device_name']} ({d['device']}), {d['dtype']}, peak {d['peak_flops'] / 1e12:.1f} TFLOP/s; "
                  f"{len(d['samples'])} GEMMs")
    table = Table(show_edge=False, pad_edge=False)
    for col in ("shape", "m", "n", "k", "TFLOP/s", "efficiency", "fit"):
        table.add_column(col, justify="right")
    for s in d["samples"]:
        table.add_row(s["label"], str(s["m"]), str(s["n"]), str(s["k"]), f"{s['flops_per_s'] / 1e12:.2f}",
                      f"{s['efficiency']:.4f}", f"{s['fitted']:.4f}")
    console.print(table)
    console.print("fitted gpu.gemm: " + ", ".join(f"{k} = {v:.4g}" for k, v in d["fit"]["params"].items())
                  + f"  (rms relative error {d['fit']['rms_rel_error']:.1%}, max {d['fit']['max_rel_error']:.1%})")
    if out:
        console.print(f"wrote {out} (extends {d['base']})")


# ----------------------------------------------------------------------------- fit / check (the collective model)
from llmpar.cli.calibrate_fit_cmd import check_cmd, fit_cmd  # noqa: E402  (their own module: nccl-tests logs vs the model)

calibrate.add_command(fit_cmd)
calibrate.add_command(check_cmd)

# ----------------------------------------------------------------------------- runs (a stack from training runs)
from llmpar.cli.calibrate_runs_cmd import runs_cmd  # noqa: E402  (its own module: calibrate_cmd is long enough)

calibrate.add_command(runs_cmd)
from llmpar.cli.calibrate_serve_cmd import serve_cmd  # noqa: E402  (serving benchmark outputs: docs/serving.md)

calibrate.add_command(serve_cmd)
