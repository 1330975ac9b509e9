"""The end of scripts/demo.sh: which mechanisms the run showed, from ``gctl events --json``."""

from __future__ import annotations

import collections
import json
import sys

SHOWN = [
    ("time slicing", "job.suspend", "job.resume"),
    ("packing", "job.pack", "job.unpack"),
    ("elastic", "job.grow", "job.shrink"),
    ("migration", "job.migrate", "intent.done"),
]


def main() -> None:
    """Print a line per mechanism: how many events of it, and whether it was seen at all."""
    kinds = collections.Counter(e["kind"] for e in json.load(sys.stdin)["events"])
    for what, first, second in SHOWN:
        counts = f"{kinds[first]} {first}, {kinds[second]} {second}"
        print(f"  {what:<13} {counts:<36} {'seen' if kinds[first] else 'NOT seen this run'}")
    print(f"  {kinds['job.end']} jobs ended; events by kind: {dict(sorted(kinds.items()))}")


if __name__ == "__main__":
    main()
