"""Gandiva against FIFO on the public traces, with the full performance model.

Each case runs ``gctl sim run TRACE --cluster C --policy gandiva --compare
fifo --json`` in its own process and the script prints one Markdown table of
the relative changes (negative is better for times). Cluster sizes are
chosen so the queue builds up: each is smaller than the trace's average GPU
demand over its span, so FIFO's queue grows and scheduling matters.

Run: ``.venv/bin/python bench/compare.py [CASE ...]`` (default: all cases).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "traces"
GCTL = Path(sys.executable).with_name("gctl")

CASES: dict[str, tuple[str, list[str]]] = {
    "trace1": ("philly_models_trace1.csv", ["--cluster", "12x8"]),
    "trace2": ("philly_models_trace2.csv", ["--cluster", "32x8"]),
    "trace3": ("philly_models_trace3.csv", ["--cluster", "8x8"]),
    "philly-6214e9": ("philly.csv", ["--cluster", "4x8", "--virtual-cluster", "6214e9"]),
}


def run_case(name: str) -> dict[str, object]:
    """Run one comparison and return its JSON report."""
    trace, args = CASES[name]
    cmd = [str(GCTL), "sim", "run", str(SHARED / trace), *args, "--compare", "fifo", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    report: dict[str, object] = json.loads(out.stdout)
    return report


def _pct(change: float | None) -> str:
    return "n/a" if change is None else f"{change * 100:+.1f} %"


def row(name: str, report: dict[str, object]) -> str:
    """One Markdown table row of a report."""
    changes = report["changes"]
    results = report["results"]
    assert isinstance(changes, dict) and isinstance(results, list)
    gandiva, fifo = (r["metrics"] for r in results)
    cells = [
        name,
        f"{report['cluster']} ({report['total_gpus']} GPUs)",
        str(report["jobs"]),
        _pct(changes["avg_jct"]["change"]),
        _pct(changes["makespan"]["change"]),
        _pct(changes["p95_jct"]["change"]),
        f"{gandiva['gpu_utilisation']:.1%} / {fifo['gpu_utilisation']:.1%}",
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
        "| case | cluster | jobs | avg JCT | makespan | p95 JCT"
        " | GPU util gandiva / fifo | gandiva sim time |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        print(row(name, run_case(name)), flush=True)


if __name__ == "__main__":
    main()
