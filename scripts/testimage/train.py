"""A stand-in for a training job, run in the test image gctl-test/train:1.

    python3 /opt/gctl/train.py [--steps N] [--step-time S] [--checkpoint-every K]
                               [--fail-at STEP] [--alloc-mb MB]

Works in the job directory ``$GCTL_JOB_DIR`` (default ``/gctl``, created if
missing). It resumes from ``checkpoint.json`` there when present, then for each
step sleeps ``S`` seconds, rewrites ``progress.json`` atomically and prints
``step I/N``. It checkpoints every K steps, on SIGUSR1 (and carries on) and on
SIGTERM or SIGINT (and exits 0). ``--fail-at`` exits 3 at that step;
``--alloc-mb`` allocates and touches that much memory first (to provoke an OOM
kill under a memory limit). Prints ``done`` and exits 0 at the end.
Standard library only.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

_signals: set[int] = set()


def _on_signal(signum: int, _frame: object) -> None:
    _signals.add(signum)


def write_json(path: Path, data: dict[str, Any], sync: bool = False) -> None:
    """Replace ``path`` with ``data`` as JSON in one step (write, then rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Run the job; return the exit code."""
    p = argparse.ArgumentParser(description="A stand-in for a training job.")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K")
    p.add_argument("--fail-at", type=int, default=0, metavar="STEP")
    p.add_argument("--alloc-mb", type=int, default=0, metavar="MB")
    args = p.parse_args(argv)

    job_dir = Path(os.environ.get("GCTL_JOB_DIR") or "/gctl")
    job_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path, progress_path = job_dir / "checkpoint.json", job_dir / "progress.json"
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, _on_signal)

    step = 0
    if ckpt_path.exists():
        step = int(json.loads(ckpt_path.read_text(encoding="utf-8"))["step"])
        print(f"resuming from step {step}", flush=True)

    def checkpoint(why: str) -> None:
        write_json(ckpt_path, {"step": step, "steps": args.steps, "time": time.time()}, True)
        print(f"checkpoint {step} ({why})", flush=True)

    ballast = bytearray(args.alloc_mb * 1024 * 1024)
    if ballast:
        ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))  # touch every page
        print(f"allocated {args.alloc_mb} MB", flush=True)

    recent: collections.deque[float] = collections.deque([time.monotonic()], maxlen=11)
    deadline = time.monotonic() + args.step_time
    while step < args.steps:
        while not _signals and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
        if signal.SIGTERM in _signals or signal.SIGINT in _signals:
            checkpoint("signal")
            return 0
        if signal.SIGUSR1 in _signals:  # checkpoint, then finish the step
            _signals.discard(signal.SIGUSR1)
            checkpoint("SIGUSR1")
            continue
        step += 1
        recent.append(time.monotonic())
        deadline = recent[-1] + args.step_time
        span = recent[-1] - recent[0]
        rate = (len(recent) - 1) / span if span > 0 else 0.0
        write_json(
            progress_path, {"step": step, "steps": args.steps, "time": time.time(), "rate": rate}
        )
        print(f"step {step}/{args.steps}", flush=True)
        if step == args.fail_at:
            print(f"failing at step {step}", file=sys.stderr, flush=True)
            return 3
        if args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
            checkpoint("periodic")
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
