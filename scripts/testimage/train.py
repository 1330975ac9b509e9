"""A stand-in for a training job, run in the test image gctl-test/train:1.

    python3 /opt/gctl/train.py [--steps N] [--step-time S] [--checkpoint-every K]
                               [--fail-at STEP] [--alloc-mb MB]

Built on the job SDK (``gctl.job``), as a real training loop would be. It
resumes from the last checkpoint in ``$GCTL_JOB_DIR`` (default ``/gctl``),
then for each step sleeps ``S`` seconds, reports progress and prints
``step I/N``; each start appends ``ATTEMPT STEP`` to ``starts.log`` there, so
tests can see where a restarted job resumed. It checkpoints every K steps,
on SIGUSR1 (and carries on) and on SIGTERM or SIGINT (and exits 0).
``--fail-at`` exits 3 at that step; ``--alloc-mb`` allocates and touches
that much memory first (to provoke an OOM kill under a memory limit).
Prints ``done`` and exits 0 at the end.
"""

from __future__ import annotations

import argparse
import sys
import time

from gctl import job

STARTS_LOG = "starts.log"
"""Appended in the job directory at every start: ``ATTEMPT STEP`` (the step it resumed at)."""


def main(argv: list[str] | None = None) -> int:
    """Run the job; return the exit code."""
    p = argparse.ArgumentParser(description="A stand-in for a training job.")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K")
    p.add_argument("--fail-at", type=int, default=0, metavar="STEP")
    p.add_argument("--alloc-mb", type=int, default=0, metavar="MB")
    args = p.parse_args(argv)

    run = job.start()
    step = int((run.resume() or {}).get("step", 0))
    if step:
        print(f"resuming from step {step}", flush=True)
    with open(run.dir / STARTS_LOG, "a", encoding="utf-8") as fh:
        fh.write(f"{run.attempt} {step}\n")

    def checkpoint(why: str) -> None:
        run.checkpoint({"step": step, "steps": args.steps})
        print(f"checkpoint {step} ({why})", flush=True)

    ballast = bytearray(args.alloc_mb * 1024 * 1024)
    if ballast:
        ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))  # touch every page
        print(f"allocated {args.alloc_mb} MB", flush=True)

    deadline = time.monotonic() + args.step_time
    while step < args.steps:
        while not run.checkpoint_due and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
        if run.checkpoint_due:  # asked by gctl: checkpoint before this step's work
            checkpoint("exit" if run.must_exit else "asked")
            if run.must_exit:
                return 0
            continue
        step += 1
        deadline = time.monotonic() + args.step_time
        run.step(step, args.steps, force=True)
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
