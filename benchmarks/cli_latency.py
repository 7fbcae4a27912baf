"""Wall-clock latency of the commands a user types first (issue 24: `--help` <= 0.1 s, `memory` <= 0.25 s; issue 25: `serve` <= 0.3 s).

    python benchmarks/cli_latency.py [-n 15]

Runs each command N times in a fresh interpreter (``python -m llmpar ...``, a subprocess, as a
shell would) and prints the median and the fastest run. The start-up is mostly imports and spec
loading; `python -X importtime -m llmpar memory llama-3-70b` shows where it goes. This is a
benchmark, not a test: nothing in the test suite times anything.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {   # name -> (arguments, target seconds: issue 24, on a 2-core machine)
    "llmpar --help": (["--help"], 0.1),
    "llmpar memory llama-3-70b": (["memory", "llama-3-70b"], 0.25),
    # issue 25: `serve` <= 0.3 s
    "llmpar serve llama-3-70b --tp 4 --concurrency 16": (["serve", "llama-3-70b", "--tp", "4", "--concurrency", "16"],
                                                         0.3),
}


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def time_once(args: list[str]) -> float:
    return _time([sys.executable, "-m", "llmpar", *args])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=15, help="runs per command (default 15)")
    n = ap.parse_args().n
    time_once(["--help"])   # warm the OS file cache and the .pyc files
    base = [sys.executable, "-c", "pass"]
    t0 = time.perf_counter()
    for _ in range(3):
        subprocess.run(base, check=True)
    bare = (time.perf_counter() - t0) / 3
    print(f"python start-up alone: {bare:.3f} s")
    deps = [sys.executable, "-c", "import numpy, pydantic.main, click, yaml, rich.console, rich.table"]
    floor = statistics.median(_time(deps) for _ in range(n))
    print(f"importing the dependencies alone (numpy, pydantic, click, yaml, rich): median {floor:.3f} s")
    if sys.flags.dont_write_bytecode:
        print("note: PYTHONDONTWRITEBYTECODE is set: modules without a .pyc are compiled on every run "
              "(`python -m compileall src` once, as pip does on install)")
    for name, (args, target) in COMMANDS.items():
        times = [time_once(args) for _ in range(n)]
        med = statistics.median(times)
        flag = "ok" if med <= target else f"over {target} s"
        # as ratios too: this machine's load moves every figure, the ratios less
        print(f"{name:<50} median {med:.3f} s  fastest {min(times):.3f} s  ({n} runs; {flag}); "
              f"{med / bare:.1f}x python start-up, {med / floor:.2f}x the dependencies' imports")


if __name__ == "__main__":
    main()
