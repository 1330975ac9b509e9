"""Concurrent CLI-style writers on one SQLite file: never "database is locked", never a lost row.

Runs the benchmark's workload (bench/concurrency.py: four submitting
processes and one updating job states) for a few seconds; the benchmark
itself runs it for 30.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "concurrency.py"


def test_four_submitters_and_an_updater_never_lock_or_lose_rows(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--seconds", "4", "--db", str(tmp_path / "c.db"), "--json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.stdout)
    assert report["errors"] == 0, report["first_error"]
    assert report["lost_rows"] == 0
    assert report["submitted"] > 100 and report["updates"] > 50
