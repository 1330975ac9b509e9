"""Simulator wall time and peak memory of gandiva on the bundled traces.

Cases (each runs in its own process so peak memory is its own):

* ``trace3-plain``: ``philly_models_trace3.csv`` on 8 x 8 GPUs, plain model
  (target <= 2 s);
* ``trace3``: the same trace on 12 x 8 GPUs, full model (target < 5 s);
* ``trace2``: ``philly_models_trace2.csv`` on 32 x 8 GPUs, full model
  (target <= 15 s);
* ``philly``: the whole of ``philly.csv`` (all virtual clusters, 82k jobs) on
  256 x 8 = 2,048 GPUs, full model (target < 10 s).

Run: ``.venv/bin/python bench/simulate.py [CASE ...]`` (default: all).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from _common import peak_rss_mib

from gctl.sim.perf import PerfConfig
from gctl.sim.runner import SimRequest, run

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces"
CASES = {
    "trace3-plain": (TRACES / "philly_models_trace3.csv", "8x8", PerfConfig.plain()),
    "trace3": (TRACES / "philly_models_trace3.csv", "12x8", PerfConfig()),
    "trace2": (TRACES / "philly_models_trace2.csv", "32x8", PerfConfig()),
    "philly": (TRACES / "philly.csv.gz", "256x8", PerfConfig()),
}


def one(case: str) -> dict[str, object]:
    """Run one case in this process and return its figures."""
    trace, cluster, perf = CASES[case]
    start = time.perf_counter()
    report = run(SimRequest(trace=trace, cluster=cluster, policies=("gandiva",), perf=perf))
    wall = time.perf_counter() - start
    result = report.results[0]
    return {
        "case": case,
        "trace": trace.name,
        "cluster": cluster,
        "model": "full" if perf == PerfConfig() else "plain",
        "jobs": report.jobs,
        "finished": result.metrics.finished,
        "events": result.events,
        "simulate_s": round(result.wall_seconds, 2),
        "total_s": round(wall, 2),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def main() -> None:
    """Run the chosen cases, each in a fresh interpreter, and print a line per case."""
    args = sys.argv[1:]
    if args[:1] == ["--one"]:
        print(json.dumps(one(args[1])))
        return
    for case in args or list(CASES):
        if case not in CASES:
            sys.exit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
        out = subprocess.run(
            [sys.executable, __file__, "--one", case], check=True, capture_output=True, text=True
        )
        r = json.loads(out.stdout)
        print(
            f"{r['case']}: {r['trace']} on {r['cluster']} ({r['model']} model), {r['jobs']} jobs"
            f" ({r['finished']} finished, {r['events']} events): simulated in"
            f" {r['simulate_s']} s, {r['total_s']} s with loading; peak RSS {r['peak_rss_mib']} MiB"
        )


if __name__ == "__main__":
    main()
