"""Replays the quick start of a running server's home page as a newcomer would: each step's curl
command pasted into bash, in order, with the shell variables set from the answers as the page
says. Exits 1 at the first step that does not answer what the page promises.

Standard library only (it runs before any virtualenv exists): python3 .ci/quickstart.py URL
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import urllib.request
from typing import Any

STEP = re.compile(r'<pre class="step">(.*?)</pre>', re.S)


def fail(message: str) -> None:
    print(f"[quickstart] FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def main(base: str) -> None:
    with urllib.request.urlopen(f"{base}/", timeout=30) as answer:
        page = answer.read().decode()
    blocks = [html.unescape(b) for b in STEP.findall(page)]
    if len(blocks) < 10:
        fail(f"the home page shows {len(blocks)} quick-start steps")
    variables: dict[str, str] = {}
    last: Any = None
    statement: Any = None
    for number, block in enumerate(blocks, start=1):
        comments = [line[2:] for line in block.splitlines() if line.startswith("# ")]
        expect = re.search(r"\(answers (\d{3})\)$", comments[0])
        if expect is None:
            fail(f"step {number} does not say what it answers: {comments[0]!r}")
            return
        only_if = next((c for c in comments if c.startswith("Only if ")), None)
        if only_if is not None:
            wanted = re.fullmatch(r"Only if the last answer's state was (\w+):", only_if)
            if wanted is None:
                fail(f"step {number}: a condition this replay cannot read: {only_if!r}")
                return
            if not isinstance(last, dict) or last.get("state") != wanted.group(1):
                print(f"[quickstart] {number}. skipped ({only_if})")
                continue
        run = subprocess.run(
            ["bash", "-c", block],
            env={**os.environ, **variables},
            capture_output=True,
            text=True,
            timeout=60,
        )
        body, _, status = run.stdout.rstrip("\n").rpartition("\n")
        if run.returncode != 0 or status != expect.group(1):
            fail(
                f"step {number} answered {status!r} (curl exit {run.returncode}), the page says "
                f"{expect.group(1)}:\n{block}\n{run.stdout}{run.stderr}"
            )
        last = json.loads(body) if body.strip() else None
        for c in comments:
            if c.startswith("Then set from the answer: "):
                for name, path in re.findall(r"([A-Z_]+)=<([\w.]+)>", c):
                    value: Any = last
                    for part in path.split("."):
                        value = value[part]
                    variables[name] = str(value)
        if "/statement" in block:
            statement = last
        print(f"[quickstart] {number}. {comments[0]}: {status}")
    if not statement or statement["entry"][0]["transactionAmount"]["amount"] != 10000:
        fail(f"the statement does not show the deposit: {statement}")
    print(f"[quickstart] every step answered as the page says ({sorted(variables)} set)")


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"))
