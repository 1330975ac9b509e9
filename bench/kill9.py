"""``kill -9`` of the daemon, more rounds than CI's 50: every job must still end exactly once.

Runs ``tests/hosts/test_daemon_kill.py`` (the real ``gctl daemon`` killed
with SIGKILL at random moments while jobs arrive, time-slice and finish on
the two local test hosts) with ``GCTL_KILL_ROUNDS`` set to ``--rounds``
(default 200), and prints how many kills and jobs the run had, how long it
took, and whether every check of the test held (every job COMPLETED with one
``job.end``, its full step count, no GPU held twice outside time slicing or
packing after any kill, no allocation or container left, no traceback in
the daemon's log). GPUs are emulated. Needs root; must not run beside the
host tests, which use the same test hosts.

Run: ``.venv/bin/python bench/kill9.py [--rounds 200]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    """Run the kill test with more rounds and print its figures and verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    test = "tests/hosts/test_daemon_kill.py"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env={**os.environ, "GCTL_KILL_ROUNDS": str(args.rounds)},
        capture_output=True,
        text=True,
    )
    found = re.search(r"kill run: .*", out.stdout)
    print(found.group(0) if found else "kill run: no figures (the run failed before the end)")
    if out.returncode:
        print(out.stdout[-4000:], out.stderr[-2000:], sep="\n")
        sys.exit(f"FAILED: {test} with {args.rounds} kills (exit {out.returncode})")
    print(f"passed: every job ended exactly once after {args.rounds} SIGKILLs of the daemon")


if __name__ == "__main__":
    main()
