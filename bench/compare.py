"""Gandiva against FIFO and 2D-LAS on the public traces, with the full performance model.

Each case runs ``gctl sim run TRACE --cluster C --policy gandiva --compare
fifo,las --json`` in its own process and the script prints one Markdown
table of gandiva's relative changes against both baselines (negative is
better for times), and its p99 JCT over FIFO's (the starvation guards must
hold the tail: at most 1.3). Cluster sizes are
chosen so the queue builds up: each has about three quarters of the trace's
average GPU demand (its ideal GPU-time over the span of its submissions;
printed as "demand"), so FIFO's queue grows and scheduling matters. (trace3
ran on 8x8 until the performance model stopped charging jobs for the spread
their size forces on them: its demand is 51.5 GPUs, so 64 GPUs never built a
queue that lasted.)

The makespans are also printed in days beside a *fluid reference*: the
makespan of a cluster that ran the trace's ideal work (duration x GPUs) at
full capacity whenever work was waiting, as if jobs could be cut into GPU
slivers. No scheduler reaches it without packing gains (which the
performance model grants, so it is a reference, not a strict bound); the
distance to it is what scheduling could still win.

Run: ``.venv/bin/python bench/compare.py [CASE ...]`` (default: all cases).
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

from gctl.sim.traces import load_trace
from gctl.sim.workload import TraceJob

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "traces"
GCTL = Path(sys.executable).with_name("gctl")
DAY = 86400.0

CASES: dict[str, tuple[str, list[str]]] = {
    "trace1": ("philly_models_trace1.csv", ["--cluster", "12x8"]),
    "trace2": ("philly_models_trace2.csv", ["--cluster", "32x8"]),
    "trace3": ("philly_models_trace3.csv", ["--cluster", "5x8"]),
    "philly-6214e9": ("philly.csv.gz", ["--cluster", "4x8", "--virtual-cluster", "6214e9"]),
}


@cache
def _jobs(name: str) -> list[TraceJob]:
    trace, args = CASES[name]
    vc = args[args.index("--virtual-cluster") + 1] if "--virtual-cluster" in args else None
    return load_trace(TRACES / trace, virtual_cluster=vc)  # sorted by submit time


def demand(name: str) -> float:
    """A case's average GPU demand: ideal GPU-seconds over the span of its submissions."""
    jobs = _jobs(name)
    span = jobs[-1].spec.submit_time - jobs[0].spec.submit_time
    return sum(j.duration * j.spec.gpus for j in jobs) / span


def fluid_makespan(name: str, gpus: int) -> float:
    """The fluid reference makespan of a case, in seconds (see the module docstring)."""
    clock = backlog = 0.0
    for job in _jobs(name):
        backlog = max(0.0, backlog - gpus * (job.spec.submit_time - clock))
        clock = job.spec.submit_time
        backlog += job.duration * job.spec.gpus
    return clock + backlog / gpus


def run_case(name: str) -> dict[str, object]:
    """Run one comparison and return its JSON report."""
    trace, args = CASES[name]
    cmd = [str(GCTL), "sim", "run", str(TRACES / trace), *args, "--compare", "fifo,las", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    report: dict[str, object] = json.loads(out.stdout)
    return report


def _pct(change: float | None) -> str:
    return "n/a" if change is None else f"{change * 100:+.1f} %"


def row(name: str, report: dict[str, object]) -> str:
    """One Markdown table row of a report."""
    by_baseline = report["changes"]
    results = report["results"]
    assert isinstance(by_baseline, dict) and isinstance(results, list)
    fifo_changes, las_changes = by_baseline["fifo"], by_baseline["las"]
    gandiva, fifo, las = (r["metrics"] for r in results)
    cells = [
        name,
        f"{report['cluster']} ({report['total_gpus']} GPUs; demand {demand(name):.0f})",
        str(report["jobs"]),
        _pct(fifo_changes["avg_jct"]["change"]),
        _pct(fifo_changes["makespan"]["change"]),
        _pct(las_changes["avg_jct"]["change"]),
        _pct(las_changes["makespan"]["change"]),
        f"{gandiva['p99_jct'] / fifo['p99_jct']:.2f}",
        " / ".join(f"{m['avg_jct'] / DAY:.2f}" for m in (gandiva, las, fifo)),
        " / ".join(
            f"{m / DAY:.1f}"
            for m in (
                gandiva["makespan"],
                las["makespan"],
                fifo["makespan"],
                fluid_makespan(name, int(str(report["total_gpus"]))),
            )
        ),
        f"{gandiva['gpu_utilisation']:.1%} / {las['gpu_utilisation']:.1%}"
        f" / {fifo['gpu_utilisation']:.1%}",
        f"{results[0]['wall_seconds']:.0f} s",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    """Run the chosen cases and print the table."""
    names = sys.argv[1:] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES)}")
    print(
        "| case | cluster | jobs | avg JCT vs fifo | makespan vs fifo | avg JCT vs las"
        " | makespan vs las | p99 JCT / fifo's | avg JCT d gandiva / las / fifo"
        " | makespan d gandiva / las / fifo / fluid | GPU util gandiva / las / fifo"
        " | gandiva sim time |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        print(row(name, run_case(name)), flush=True)


if __name__ == "__main__":
    main()
