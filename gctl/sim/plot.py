"""``gctl sim run --plot``: the policies of a report side by side in one SVG picture.

Two panels (:mod:`gctl.sim.svg`): the CDF of the finished jobs' completion
times per policy, on a logarithmic time axis (JCTs are heavy-tailed), and
the queue length over simulated time per policy, from the first arrival.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gctl.sim.runner import SimReport
from gctl.sim.svg import Panel, Series, chart

__all__ = ["jct_cdf", "report_svg"]

_UNITS = ((86400.0, "days"), (3600.0, "hours"), (60.0, "minutes"))


def jct_cdf(jcts: Sequence[float]) -> list[tuple[float, float]]:
    """The empirical CDF of ``jcts``: ``(x, fraction of values <= x)`` at each distinct value.

    Points come in increasing ``x``; the last fraction is 1. No values, no points.
    """
    ordered = sorted(jcts)
    n = len(ordered)
    points: list[tuple[float, float]] = []
    for i, value in enumerate(ordered, 1):
        if i < n and ordered[i] == value:
            continue
        points.append((value, i / n))
    return points


def _time_unit(span: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for an axis spanning ``span`` seconds."""
    return next(((s, name) for s, name in _UNITS if span >= 2 * s), (1.0, "seconds"))


def report_svg(report: SimReport) -> str:
    """The SVG picture of ``report``: JCT CDF and queue length over time, a line per policy."""
    cdfs: list[Series] = []
    for result, records in zip(report.results, report.records, strict=True):
        points = jct_cdf([r.jct for r in records if r.jct is not None])
        if points:
            points.insert(0, (points[0][0], 0.0))
        cdfs.append(Series(result.policy, points, step=True))
    starts = [r.queue[0][0] for r in report.results if r.queue]
    ends = [r.queue[-1][0] for r in report.results if r.queue]
    t0 = min(starts, default=0.0)
    scale, unit = _time_unit(max(ends, default=t0) - t0)
    queues = [
        Series(r.policy, [((t - t0) / scale, float(n)) for t, n in r.queue], step=True)
        for r in report.results
    ]
    trace = Path(report.trace).name
    where = f"{trace} on {report.cluster} ({report.total_gpus} GPUs, {report.jobs} jobs)"
    return chart(
        [
            Panel(
                f"JCT CDF: {where}",
                "job completion time (s), log scale",
                "fraction of finished jobs",
                cdfs,
                log_x=True,
                ident="jct-cdf",
            ),
            Panel(
                "queue length over time",
                f"simulated time ({unit}) since the first arrival",
                "jobs waiting",
                queues,
                ident="queue",
            ),
        ]
    )
