"""The learning curve of a dl2 training run as a small self-contained SVG file.

Drawn by gctl's own chart writer (:mod:`gctl.sim.svg`), as ``gctl sim run --plot`` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gctl.sim.svg import Panel, Series, chart


def write_svg(path: Path, log: Sequence[dict[str, Any]]) -> None:
    """Plot the running reward and the check episodes' average JCT against the episode."""
    reward = [
        (float(e["episode"]), float(e["running_reward"])) for e in log if "running_reward" in e
    ]
    checks = [
        (float(e["episode"]), float(e["check_jct"] if "check_jct" in e else e["avg_jct"]))
        for e in log
        if e["phase"] == "check" or "check_jct" in e
    ]
    svg = chart(
        [
            Panel(
                "running reward (job fractions, discounted)",
                "episode",
                "reward",
                [Series("running reward", reward)],
                y_from_zero=False,
            ),
            Panel(
                "check episodes: avg JCT (s), greedy",
                "episode",
                "avg JCT (s)",
                [Series("check avg JCT", checks)],
                y_from_zero=False,
            ),
        ],
        panel_height=160,
    )
    path.write_text(svg, encoding="utf-8")
