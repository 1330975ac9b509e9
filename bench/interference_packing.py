"""Packing by least predicted interference against packing by utilisation sum, in the simulator.

The same trace runs twice under gandiva on the same cluster: once with
``interference=true`` (a waiting job packs beside the partner of least
predicted slow-down, and only where the pair is predicted to pay; the
policy predicts from the pair table, :mod:`gctl.sim.pairs`), once with
``interference=false`` (Gandiva's packing: lightest partner whose
utilisation sum fits). It prints avg JCT of every job and of the *packed
jobs* (those that ran packed in either run), the packs and unpacks, and the
change. The target (issue 21): >= 10 % lower avg JCT for the packed jobs.

Figures come from the simulator's performance model (gavel's measured pair
speeds), not from GPUs.

Run: ``.venv/bin/python bench/interference_packing.py [--cluster bench/clusters/mixed.toml]
[--trace traces/philly_models_trace3.csv ...] [-o KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from gctl.cli.parse import parse_options
from gctl.core.policy import load_policy
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import Simulator
from gctl.sim.traces import load_trace

ROOT = Path(__file__).resolve().parent.parent
TRACES = ("traces/philly_models_trace1.csv", "traces/philly_models_trace3.csv")


def _run(
    trace: Path, cluster: str, aware: bool, options: dict[str, Any]
) -> tuple[Simulator, float]:
    """The simulator after the run (its records and counters), and the run's wall time."""
    policy = load_policy("gandiva", **{**options, "interference": aware})
    sim = Simulator(parse_cluster(cluster), policy)
    result = sim.run(load_trace(trace))
    if result.unfinished:
        raise SystemExit(f"{trace}: {len(result.unfinished)} jobs unfinished")
    return sim, result.wall_seconds


def _jct(sim: Simulator, jobs: set[str] | None = None) -> float:
    times = [
        r.finish - r.submit
        for r in sim.records
        if r.finish is not None and (jobs is None or r.job_id in jobs)
    ]
    return statistics.fmean(times) if times else float("nan")


def main() -> None:
    """Run each trace both ways and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default=str(ROOT / "bench" / "clusters" / "mixed.toml"))
    ap.add_argument("--trace", action="append", help="trace file (repeatable)")
    ap.add_argument("-o", "--option", action="append", default=[], help="gandiva KEY=VALUE")
    args = ap.parse_args()
    options = parse_options(args.option)
    print(f"gandiva on {args.cluster}; avg JCT in seconds")
    header = (
        f"{'trace':28} {'packing':>13} {'all jobs':>10} {'packed jobs':>11} {'n':>4}"
        f" {'packs':>6} {'unpacks':>7} {'wall s':>6}"
    )
    print(header)
    for name in args.trace or TRACES:
        trace = ROOT / name if not Path(name).is_absolute() else Path(name)
        done = {aware: _run(trace, args.cluster, aware, options) for aware in (False, True)}
        runs = {aware: sim for aware, (sim, _) in done.items()}
        packed = set(runs[False].counters.packed) | set(runs[True].counters.packed)
        jct = {aware: _jct(sim, packed) for aware, sim in runs.items()}
        for aware, (sim, wall) in done.items():
            label = "interference" if aware else "util sum"
            print(
                f"{Path(name).name:28} {label:>13} {_jct(sim):10.0f} {jct[aware]:11.0f}"
                f" {len(packed):4d} {sim.counters.packs:6d} {sim.counters.unpacks:7d} {wall:6.1f}"
            )
        change = jct[True] / jct[False] - 1 if jct[False] else float("nan")
        overall = _jct(runs[True]) / _jct(runs[False]) - 1
        print(f"{'':28} {'change':>13} {overall:10.1%} {change:11.1%}")


if __name__ == "__main__":
    main()
