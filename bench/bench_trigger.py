"""`multibank webhooks trigger EVENT` for every event type, each timed as a whole process: the
CPU seconds (user + system, the operating system's accounting of the finished child, which a
busy machine does not inflate) of `--runs` runs, after one warm-up run that is not counted.
Issue 41 §2 bounds each trigger at 2 s of CPU; a bare `python -c pass` is timed beside them as
the floor no command can go below.

Every run must exit 0 and print the asked event's id on stdout (a trigger that fails is not
counted as fast). The database is a new SQLite file in a temporary folder unless
`--database-url` names another; a programme with a webhook URL nobody listens on is created in
it, so events are recorded and never delivered.

Usage: .venv/bin/python bench/bench_trigger.py [--runs 3] [--events TYPE,TYPE]
       [--database-url URL] [--bound 2.0]
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MULTIBANK = [sys.executable, "-m", "multibank"]


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """CPU seconds of one run of `argv`, and its stdout; exits the bench when it fails."""
    before = children_cpu()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    took = children_cpu() - before
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[2:])} exited {done.returncode}: {done.stderr[-800:]}")
    return took, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--events", default="", help="comma-separated event types (default: all)")
    ap.add_argument("--database-url", default="")
    ap.add_argument("--bound", type=float, default=2.0, help="CPU seconds each trigger may take")
    args = ap.parse_args()

    folder = tempfile.mkdtemp(prefix="bench-trigger-")
    env = dict(os.environ)
    env["MULTIBANK_DATABASE_URL"] = (
        args.database_url or f"sqlite+aiosqlite:///{Path(folder) / 'trigger.db'}"
    )
    env.setdefault("PYTHONPATH", str(ROOT / "src"))
    # Bytecode written and kept, as an installed package has it: without it every run would
    # compile the package again (this machine's environment sets PYTHONDONTWRITEBYTECODE).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(ROOT / ".cache" / "pycache"))
    name = f"bench-trigger-{secrets.token_hex(3)}"
    run([*MULTIBANK, "db", "upgrade"], env)
    run(
        [
            *MULTIBANK,
            *("programme", "create", "--name", name),
            *("--webhook-url", "http://127.0.0.1:9/nobody-listens"),
        ],
        env,
    )
    _, listed = run([*MULTIBANK, "webhooks", "trigger", "--list"], env)
    events = args.events.split(",") if args.events else listed.split()

    floor = statistics.median(run([sys.executable, "-c", "pass"], env)[0] for _ in range(5))
    print(f"floor (python -c pass): {floor:.3f} s CPU")
    print(f"{'event':<70} {'median':>7} {'max':>7}")
    worst: list[float] = []
    for event in events:
        cpus: list[float] = []
        for i in range(args.runs + 1):
            took, out = run([*MULTIBANK, "webhooks", "trigger", "--programme", name, event], env)
            if event not in out:
                sys.exit(f"{event}: the trigger printed no such event: {out!r}")
            if i:
                cpus.append(took)
        worst.append(max(cpus))
        print(f"{event:<70} {statistics.median(cpus):7.3f} {max(cpus):7.3f}", flush=True)
    over = sum(1 for w in worst if w > args.bound)
    print(
        f"\n{len(events)} events, {args.runs} runs each: mean of the worst runs "
        f"{statistics.mean(worst):.3f} s, highest {max(worst):.3f} s; {over} over "
        f"{args.bound} s -> {'PASS' if not over else 'FAIL'}"
    )
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
