"""`scripts/test` itself (issue 41 §6): `--help` prints its own help and does nothing else, and
a PgBouncer it starts is stopped when it ends, whatever the outcome. Run on a copy of the script
in a folder of its own, beside stand-ins for what it calls (the installer, the browser, the
PostgreSQL check, PgBouncer, pytest), so these take a second and start no real service."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "test"

# A PgBouncer stand-in: a process that runs until signalled (SIGINT stops it, as PgBouncer's
# safe shutdown), its pid where the real one's is, in a session of its own as a daemon is.
PGBOUNCER = f"""#!/usr/bin/env bash
mkdir -p .cache/pgbouncer
setsid {sys.executable} -c 'import pathlib, signal, time
signal.signal(signal.SIGINT, signal.default_int_handler)
pathlib.Path(".cache/pgbouncer/ready").touch()
time.sleep(300)' >/dev/null 2>&1 &
echo $! >.cache/pgbouncer/pgbouncer.pid
# Returns once it listens, as the real script does.
until [ -e .cache/pgbouncer/ready ]; do sleep 0.05; done
"""
# pytest's stand-in answers as the run asks (PYTEST_EXIT); the PostgreSQL check says "reachable".
PYTHON = """#!/usr/bin/env bash
case "$*" in
  *pg_reachable.py*) exit 0 ;;
  *"-m pytest"*)
    # The PgBouncer slice (its URL set) takes SLICE_SECONDS, as a long run would.
    [ -n "${MULTIBANK_TEST_PGBOUNCER_URL:-}" ] && sleep "${SLICE_SECONDS:-0}"
    echo "1 passed in 0.01s"; exit "${PYTEST_EXIT:-0}" ;;
esac
exit 0
"""


def checkout(tmp_path: Path) -> Path:
    """A folder with `scripts/test` and stand-ins for everything it runs."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "test")
    stubs = {
        "scripts/bootstrap.sh": "exit 0\n",
        "scripts/browser.sh": "exit 0\n",
        "scripts/pgbouncer.sh": PGBOUNCER,
        ".venv/bin/python": PYTHON,
    }
    for name, text in stubs.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    return repo


def run(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Runs the copy to its end. Its output goes to files, not pipes: the progress loop's last
    `sleep` may outlive the script, and a pipe would stay open until it ends."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    environ.pop("CI", None)
    out, err = repo.parent / "out.txt", repo.parent / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        done = subprocess.run(
            ["bash", str(repo / "scripts" / "test"), *args],
            cwd=repo,
            env={**environ, **env},
            stdout=stdout,
            stderr=stderr,
            timeout=60,
        )
    return subprocess.CompletedProcess(done.args, done.returncode, out.read_text(), err.read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A stopped child of this process stays a zombie until reaped; it no longer runs.
    status = Path(f"/proc/{pid}/stat")
    return not status.exists() or status.read_text().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_scripts_own_help_and_does_nothing_else(tmp_path, flag):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "test")  # alone: anything it ran would fail
    started = time.monotonic()
    done = run(repo, flag)
    assert time.monotonic() - started < 5
    assert (done.returncode, done.stderr) == (0, ""), done
    assert done.stdout.startswith("Usage: scripts/test [PYTEST ARGUMENTS...]\n")
    for said in (
        "uv.lock",  # what it installs
        "chromium",
        "pgbouncer",
        "PgBouncer",  # which services it starts
        "stopped when the run ends",
        "MULTIBANK_TEST_POSTGRES_URL",  # the variables it reads
        "MULTIBANK_TEST_POSTGRES_PREFIX",
        "MULTIBANK_TEST_PGBOUNCER_URL",
        "MULTIBANK_TEST_REDIS_URL",
        "CI",
    ):
        assert said in done.stdout, said
    assert sorted(p.name for p in repo.iterdir()) == ["scripts"]  # no .venv, no .cache, no log


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_the_pgbouncer_it_starts_is_stopped_when_it_ends(tmp_path, outcome):
    repo = checkout(tmp_path)
    done = run(repo, PYTEST_EXIT="0" if outcome == "passed" else "1")
    assert done.returncode == (0 if outcome == "passed" else 1), done.stdout + done.stderr
    assert "PgBouncer slice" in done.stdout
    pid = int((repo / ".cache/pgbouncer/pgbouncer.pid").read_text())
    assert not alive(pid), "PgBouncer still runs after scripts/test ended"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_pgbouncer_it_starts_is_stopped_when_it_is_interrupted(tmp_path):
    repo = checkout(tmp_path)
    # The slice's pytest stand-in waits, as a long run would, until the script is stopped.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MULTIBANK_")}
    proc = subprocess.Popen(
        ["bash", str(repo / "scripts" / "test")],
        cwd=repo,
        env={**environ, "SLICE_SECONDS": "30"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pidfile = repo / ".cache/pgbouncer/pgbouncer.pid"
    try:
        deadline = time.monotonic() + 20
        while not (repo / ".cache/pgbouncer/ready").exists():  # PgBouncer runs: the slice too
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        pid = int(pidfile.read_text())
        os.killpg(proc.pid, signal.SIGTERM)  # the whole run, as a CI timeout stops it
        proc.wait(20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10
    while alive(pid):
        assert time.monotonic() < deadline, "PgBouncer still runs after scripts/test was stopped"
        time.sleep(0.05)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_pgbouncer_that_was_already_running_is_left_alone(tmp_path):
    repo = checkout(tmp_path)
    subprocess.run(["bash", "scripts/pgbouncer.sh"], cwd=repo, check=True)
    pid = int((repo / ".cache/pgbouncer/pgbouncer.pid").read_text())
    # The stand-in starts another when called again; the real one finds its own and returns.
    (repo / "scripts/pgbouncer.sh").write_text("exit 0\n")
    try:
        done = run(repo)
        assert done.returncode == 0, done.stdout + done.stderr
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
