"""A stand-in for a training job, run in the test image gctl-test/train:1.

    python3 /opt/gctl/train.py [--steps N] [--step-time S] [--checkpoint-every K]
                               [--fail-at STEP] [--alloc-mb MB] [--gpu-busy F]
                               [--batch B --sample-time T [--fixed-time A]]

Built on the job SDK (``gctl.job``), as a real training loop would be. It
resumes from the last checkpoint in ``$GCTL_JOB_DIR`` (default ``/gctl``),
then for each step sleeps ``S`` seconds, reports progress and prints
``step I/N``; each start appends ``ATTEMPT STEP`` to ``starts.log`` there, so
tests can see where a restarted job resumed, and each checkpoint appends
``ATTEMPT STEP`` to ``checkpoints.log``, so they can see which run wrote
it. It checkpoints every K steps, on SIGUSR1 (and carries on) and on
SIGTERM or SIGINT (and exits 0).
``--fail-at`` exits 3 at that step; ``--alloc-mb`` allocates and touches
that much memory first (to provoke an OOM kill under a memory limit).
Prints ``done`` and exits 0 at the end.

``--gpu-busy F`` makes the first ``F`` of each step GPU compute. On emulated
GPUs (``$GCTL_EMULATED_GPU_DIR`` set) that compute reserves time on each of
the job's emulated GPUs, so jobs sharing one queue for it as their kernels
would on a real GPU: a file per GPU holds when it is next free, and a step
takes the first slot free on all its GPUs, under ``flock`` for the instant
of the reservation. A job frozen in that instant (a throttle's freezer)
would hold the lock while frozen; a real GPU does not wait for a frozen
process, so a lock held longer than :data:`LOCK_WAIT` is passed by (the
reservation is then read and written unlocked, and the later of the two
ends is kept).

``--batch B`` makes it a data-parallel job of global batch ``B`` over its
GPUs (one worker each), split as gctl says (``run.batch_size``). Each step,
worker ``i`` computes ``(A + T * b_i) / speed`` seconds on its own GPU
(``A`` = ``--fixed-time``, ``T`` = ``--sample-time``, ``b_i`` its local
batch), ``speed`` being its GPU model's emulated speed relative to a V100
(:data:`EMULATED_SPEED`); the step ends when the slowest worker is done, and
each worker's time (queueing behind other jobs on a shared GPU included) is
reported to gctl. It needs emulated GPUs.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from gctl import job

STARTS_LOG = "starts.log"
"""Appended in the job directory at every start: ``ATTEMPT STEP`` (the step it resumed at)."""
CHECKPOINTS_LOG = "checkpoints.log"
"""Appended in the job directory at every checkpoint: ``ATTEMPT STEP``."""


EMULATED_SPEED = {"K80": 0.213, "P100": 0.762, "V100": 1.0}
"""Training speed of a GPU model relative to a V100, for emulated GPUs: the geometric mean
over the simulator's eight trace models of gavel's measured solo throughputs
(``gctl/sim/data/profiles.json``); other models count as a V100."""


LOCK_WAIT = 0.02
"""Seconds a reservation waits for a GPU file's lock before it passes a (frozen) holder by."""


def _lock(handle: TextIO) -> None:
    """Lock a GPU file, or give up after :data:`LOCK_WAIT` (module docstring)."""
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.001)


def _next_free(handle: TextIO) -> float:
    handle.seek(0)
    return float(handle.read() or 0)


def _reserve(handle: TextIO, end: float) -> None:
    """Write the GPU's new next-free time (never earlier than what is there now)."""
    end = max(end, _next_free(handle))
    handle.seek(0)
    handle.truncate()
    handle.write(repr(end))
    handle.flush()


class EmulatedGpus:
    """The job's emulated GPUs: compute reserves a slot of GPU time on all of them."""

    def __init__(self, root: str, indices: list[int]) -> None:
        self.files = [Path(root) / f"gpu{i}.next-free" for i in sorted(indices)]
        for f in self.files:
            f.touch()

    def compute(self, seconds: float) -> None:
        """Hold the GPUs for ``seconds`` of compute, after whatever is queued on them."""
        handles = [open(f, "r+", encoding="ascii") for f in self.files]  # noqa: SIM115
        try:
            for h in handles:  # sorted order: no deadlock between multi-GPU jobs
                _lock(h)
            start = max([time.time(), *(_next_free(h) for h in handles)])
            for h in handles:
                _reserve(h, start + seconds)
        finally:
            for h in handles:
                h.close()  # closing releases the lock
        time.sleep(max(0.0, start + seconds - time.time()))

    def compute_each(self, seconds: list[float]) -> list[float]:
        """Each GPU computes its own ``seconds`` at once (workers); each one's time till done."""
        begun = time.time()
        ends = []
        for f, took in zip(self.files, seconds, strict=True):
            with open(f, "r+", encoding="ascii") as h:
                _lock(h)
                start = max(begun, _next_free(h))
                _reserve(h, start + took)
            ends.append(start + took)
        time.sleep(max(0.0, max(ends) - time.time()))
        return [end - begun for end in ends]


def gpus_from_env() -> EmulatedGpus | None:
    """The emulated GPUs gctl gave this job, if it runs on emulated GPUs."""
    root = os.environ.get("GCTL_EMULATED_GPU_DIR")
    indices = os.environ.get("GCTL_GPU_INDICES", "")
    if not root or not indices:
        return None
    return EmulatedGpus(root, [int(i) for i in indices.split(",")])


def main(argv: list[str] | None = None) -> int:
    """Run the job; return the exit code."""
    p = argparse.ArgumentParser(description="A stand-in for a training job.")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--step-time", type=float, default=0.1)
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K")
    p.add_argument("--fail-at", type=int, default=0, metavar="STEP")
    p.add_argument("--alloc-mb", type=int, default=0, metavar="MB")
    p.add_argument("--gpu-busy", type=float, default=0.0, metavar="F")
    p.add_argument("--batch", type=int, default=0, metavar="B")
    p.add_argument("--sample-time", type=float, default=0.0, metavar="T")
    p.add_argument("--fixed-time", type=float, default=0.0, metavar="A")
    args = p.parse_args(argv)
    gpus = gpus_from_env() if args.gpu_busy > 0 or args.batch else None
    if args.batch and gpus is None:
        p.error("--batch needs emulated GPUs")

    run = job.start(batch=args.batch or None)
    models = run.gpu_models or ["V100"] * max(run.gpus, 1)
    speeds = [EMULATED_SPEED.get(m.upper(), 1.0) for m in models]
    step = int((run.resume() or {}).get("step", 0))
    if step:
        print(f"resuming from step {step}", flush=True)
    with open(run.dir / STARTS_LOG, "a", encoding="utf-8") as fh:
        fh.write(f"{run.attempt} {step}\n")

    def checkpoint(why: str) -> None:
        run.checkpoint({"step": step, "steps": args.steps})
        with open(run.dir / CHECKPOINTS_LOG, "a", encoding="utf-8") as fh:
            fh.write(f"{run.attempt} {step}\n")
        print(f"checkpoint {step} ({why})", flush=True)

    ballast = bytearray(args.alloc_mb * 1024 * 1024)
    if ballast:
        ballast[::4096] = b"\1" * len(range(0, len(ballast), 4096))  # touch every page
        print(f"allocated {args.alloc_mb} MB", flush=True)

    worker_times: list[float] = []

    def work() -> float:
        """Start a step: its GPU compute first; when the rest of it is due to end."""
        begun = time.monotonic()
        if gpus is not None and args.batch:
            local = run.batch_sizes()
            need = [
                (args.fixed_time + args.sample_time * b) / v
                for b, v in zip(local, speeds, strict=True)
            ]
            worker_times[:] = gpus.compute_each(need)
        elif gpus is not None:
            gpus.compute(args.gpu_busy * args.step_time)
        return max(time.monotonic(), begun + args.step_time)

    deadline = work()
    while step < args.steps:
        while not run.checkpoint_due and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
        if run.checkpoint_due:  # asked by gctl: checkpoint before this step's work
            checkpoint("exit" if run.must_exit else "asked")
            if run.must_exit:
                return 0
            continue
        step += 1
        deadline = work()
        run.step(step, args.steps, force=True, worker_times=worker_times or None)
        print(f"step {step}/{args.steps}", flush=True)
        if step == args.fail_at:
            print(f"failing at step {step}", file=sys.stderr, flush=True)
            return 3
        if args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
            checkpoint("periodic")
    run.finish(step)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
