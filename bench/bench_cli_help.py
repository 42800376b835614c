"""`multibank --help` and every command's `--help`, each timed as a whole process: from its
start to its exit, the interpreter's start-up and every import included (issue 35 §6: each
answers in at most 1 s). A bare `python -c pass` is timed beside them as the floor no command
can go below. Prints, per command, the median, min and max wall seconds of `--runs` runs
(after one warm-up run that is not counted), the median CPU seconds (user + system, the
operating system's accounting of the finished child: what a busy machine does not inflate) and
the median wall's multiple of the floor.

Usage: .venv/bin/python bench/bench_cli_help.py [--runs 5] [--multibank .venv/bin/multibank]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def commands() -> list[tuple[str, ...]]:
    """Every group and command of the app, as the words after `multibank`."""
    import typer

    from multibank.cli import app

    found: list[tuple[str, ...]] = []

    def walk(path: tuple[str, ...], command: object) -> None:
        found.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk((*path, name), sub)

    walk((), typer.main.get_command(app))
    return found


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of `runs` runs of `argv` (one warm-up first, not counted)."""
    walls: list[float] = []
    cpus: list[float] = []
    for i in range(runs + 1):
        cpu = _children_cpu()
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        took = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"{argv} exited {done.returncode}: {done.stderr.decode()[:500]}")
        if i:
            walls.append(took)
            cpus.append(_children_cpu() - cpu)
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--multibank", default=str(ROOT / ".venv" / "bin" / "multibank"))
    args = parser.parse_args()
    multibank = Path(args.multibank)
    # The interpreter the command starts with (its shebang), for the floor.
    python = multibank.read_text().splitlines()[0].removeprefix("#!").strip()
    walls, cpus = timed([python, "-c", "pass"], args.runs)
    floor = statistics.median(walls)
    print(f"{'command':<40}{'wall s':>8}{'min':>7}{'max':>7}{'cpu s':>7}{'x floor':>9}")
    print(f"{'python -c pass (floor)':<40}{floor:>8.3f}{'':>14}{statistics.median(cpus):>7.3f}")
    worst = 0.0
    for path in commands():
        walls, cpus = timed([str(multibank), *path, "--help"], args.runs)
        median = statistics.median(walls)
        worst = max(worst, median)
        name = " ".join(("multibank", *path, "--help"))
        print(
            f"{name:<40}{median:>8.3f}{min(walls):>7.3f}{max(walls):>7.3f}"
            f"{statistics.median(cpus):>7.3f}{median / floor:>9.1f}"
        )
    print(f"slowest median wall: {worst:.3f} s")


if __name__ == "__main__":
    main()
