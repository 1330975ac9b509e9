"""Fault injection on the test hosts: 300 random faults while the daemon runs jobs; 0 violations.

Runs ``tests/hosts/test_chaos.py`` (the real ``gctl daemon`` on the two local
test hosts, with faults drawn at random: kill -9 of the daemon, a host's
sshd stopped, a host frozen with SIGSTOP, its dockerd stopped, its SSH key
changed; see ``tests/hosts/chaos.py`` for the invariants checked) with
``--faults`` faults (default 300) and prints the run's figures and every
violation. GPUs are emulated. Needs root; must not run beside the host
tests, which use the same test hosts.

Run: ``.venv/bin/python bench/chaos.py [--faults 300] [--seed 0] [--kinds kill9,ssh,...]``
"""

from __future__ import annotations

import argparse
import re
import sys

from _common import run_test


def main() -> None:
    """Run the chaos test with more faults and print its figures and verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default="kill9,ssh,freeze,engine,rekey")
    args = parser.parse_args()
    test = "tests/hosts/test_chaos.py"
    out = run_test(
        test,
        GCTL_CHAOS_FAULTS=str(args.faults),
        GCTL_CHAOS_SEED=str(args.seed),
        GCTL_CHAOS_KINDS=args.kinds,
    )
    found = re.search(r"chaos run: .*", out.stdout)
    print(found.group(0) if found else "chaos run: no figures (the run failed before the end)")
    if out.returncode:
        print(out.stdout[-6000:], out.stderr[-2000:], sep="\n")
        sys.exit(f"FAILED: {test} with {args.faults} faults (exit {out.returncode})")
    print(f"passed: {args.faults} faults, every invariant held")


if __name__ == "__main__":
    main()
