"""Run the repo's helper scripts (scripts/*.sh) from tests, failing with their stderr."""

from __future__ import annotations

import pathlib
import subprocess

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_script(name: str, args: list[str], timeout: float) -> str:
    """Run ``scripts/NAME ARGS...`` from the repo root; its stdout, or RuntimeError with stderr."""
    what = " ".join([name, *args])
    try:
        proc = subprocess.run(
            [str(REPO_ROOT / "scripts" / name), *args],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{what} failed: {exc}") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}:\n{proc.stderr.strip()}")
    return proc.stdout
