"""The job SDK: what a training loop in a gctl container uses to talk to gctl.

Standard library only, and Python 3.8 or newer, so it runs in any job image.
A loop reports each mini-batch, learns its GPUs, and saves and loads
checkpoints when gctl asks for them::

    from gctl import job

    run = job.start()                       # reads the GCTL_* environment
    state = run.resume() or {"step": 0}     # the last checkpoint's state, if any
    for step in range(state["step"], total):
        train_one_batch()
        run.step(step + 1, total)           # progress, at most twice a second on disk
        if run.checkpoint_due:              # gctl asked: save at this batch boundary
            save_weights(run.checkpoint_dir)
            run.checkpoint({"step": step + 1})
            if run.must_exit:
                sys.exit(0)
    run.finish()                            # done: gctl may now record it COMPLETED

A data-parallel loop over several GPUs also gives its global batch and
takes each worker's local batch from gctl, which balances them over unequal
GPUs (the global batch never changes)::

    run = job.start(batch=256)
    for step in ...:
        local = run.batch_size(rank)        # this step's batch of worker ``rank``
        ...                                 # forward/backward on ``local`` samples
        run.step(step + 1, total, worker_times=times)  # each worker's compute seconds

What gctl and the job agree on, in the job directory (``$GCTL_JOB_DIR``,
``/gctl`` in the container, kept on the host across restarts):

- ``progress.json``: ``{"step", "steps", "time", "rate", "span", "sdk"}``,
  replaced atomically; the daemon reads it to measure progress (``rate`` is
  steps a second over the last ``span`` seconds, both absent until ten
  steps were taken). Its final form
  (:meth:`Run.finish`, or a report of the last of ``steps``) adds
  ``"done": true``: only then does gctl record a job that exits 0 as
  COMPLETED. An exit 0 before it, e.g. a checkpoint and exit on a SIGTERM
  that gctl did not send (the engine or the host stopping), is an
  interruption: the job restarts from its checkpoint.
- ``checkpoint.json``: ``{"step", "state", "time"}`` written atomically and
  synced after the job's own files in ``checkpoint/``; a restarted job
  resumes from it, on the same GPUs or elsewhere.
- ``split.json`` (written by gctl): ``{"version", "plan": [[split, steps],
  ..., [split, null]]}``, a split being one local batch per worker summing
  to the global batch; the loop runs each split for its steps (a short
  profile at a few splits, so that gctl can fit each worker's batch-size to
  time curve), then holds the last. A new version is taken at the next step
  boundary; a split that does not fit (wrong worker count or sum) is
  ignored. ``progress.json`` then carries ``"batch": {"global", "local",
  "version", "points"}``, ``points`` being ``[worker, local batch, mean
  seconds, steps]`` for every batch size each worker ran at in this run.
- Signals: SIGUSR1 asks for a checkpoint at the next batch boundary, then
  the job carries on; SIGTERM (``docker stop``) and SIGINT ask for a
  checkpoint and a clean exit. Either way the loop decides when, so a
  checkpoint is never taken in the middle of a batch.

Jobs that do not use this SDK still run; gctl then estimates their progress
from GPU utilisation.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

PROGRESS_FILE = "progress.json"
SPLIT_FILE = "split.json"
MAX_POINTS = 64
"""Most (worker, batch size) points a run keeps for its report."""
CHECKPOINT_FILE = "checkpoint.json"
CHECKPOINT_DIR = "checkpoint"
SDK_VERSION = 1


def _write_json(path: Path, data: dict[str, Any], sync: bool) -> None:
    """Replace ``path`` with ``data`` as JSON in one step (write aside, then rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        if sync:
            os.fsync(fh.fileno())
    os.replace(tmp, path)


class Run:
    """One run of a job: its GPUs, its directory, and gctl's requests to it."""

    def __init__(self, env: dict[str, str] | None = None, *, report_every: float = 0.5) -> None:
        env = dict(os.environ if env is None else env)
        self.job_id = int(env["GCTL_JOB_ID"]) if env.get("GCTL_JOB_ID", "").isdigit() else None
        self.attempt = int(env.get("GCTL_ATTEMPT", "0") or 0)
        self.node = env.get("GCTL_NODE")
        self.gpus = int(env.get("GCTL_GPUS", "0") or 0)
        self.gpu_uuids = [u for u in env.get("GCTL_GPU_UUIDS", "").split(",") if u]
        self.gpu_models = [m for m in env.get("GCTL_GPU_MODELS", "").split(",") if m]
        """Each GPU's model (``V100``, ...): worker ``i`` runs on the ``i``-th."""
        self.emulated_gpus = env.get("GCTL_EMULATED_GPUS") == "1"
        mem = env.get("GCTL_GPU_MEM_MB", "")
        self.gpu_mem_mb = int(mem) if mem.isascii() and mem.isdigit() else None
        """The job's GPU memory limit on each GPU (``--gpu-mem``), in MiB; None: none."""
        self.dir = Path(env.get("GCTL_JOB_DIR") or "/gctl")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir = self.dir / CHECKPOINT_DIR
        self.checkpoint_dir.mkdir(exist_ok=True)
        self._report_every = report_every
        self._last_report = float("-inf")  # the first step is reported, whatever the clock
        self._recent: deque[float] = deque(maxlen=11)
        self._asked_checkpoint = False
        self._asked_exit = False
        self.global_batch: int | None = None
        """The job's global batch (``start(batch=...)``); None: gctl does not split it."""
        self._plan: list[tuple[list[int], int | None]] = []
        self._plan_step = 0
        self._split_version = 0
        self._split_seen: tuple[int, int] | None = None
        self._points: dict[tuple[int, int], tuple[float, int]] = {}

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._asked_checkpoint = True
        if signum != signal.SIGUSR1:
            self._asked_exit = True

    def listen(self) -> Run:
        """Take SIGUSR1, SIGTERM and SIGINT as checkpoint requests (main thread only)."""
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        return self

    @property
    def checkpoint_due(self) -> bool:
        """Whether gctl asked for a checkpoint (take it at this batch boundary)."""
        return self._asked_checkpoint

    @property
    def must_exit(self) -> bool:
        """Whether gctl asked the job to stop (after its checkpoint)."""
        return self._asked_exit

    def resume(self) -> dict[str, Any] | None:
        """The state saved with the last checkpoint, or None on a first start."""
        path = self.dir / CHECKPOINT_FILE
        if not path.exists():
            return None
        saved = json.loads(path.read_text(encoding="utf-8"))
        state = saved.get("state")
        return dict(state) if isinstance(state, dict) else {"step": int(saved.get("step", 0))}

    def batch_sizes(self) -> list[int]:
        """The local batch of every worker (one per GPU) for this step: gctl's split, else equal."""
        if self.global_batch is None:
            raise RuntimeError("no global batch: start the run with job.start(batch=...)")
        if self._plan:
            return list(self._plan[0][0])
        workers = max(self.gpus, 1)
        base, extra = divmod(self.global_batch, workers)
        return [base + (1 if i < extra else 0) for i in range(workers)]

    def batch_size(self, worker: int = 0) -> int:
        """The local batch of worker ``worker`` (0 to GPUs - 1) for this step."""
        return self.batch_sizes()[worker]

    def _next_split(self, worker_times: list[float] | None) -> None:
        """At a step boundary: record the workers' times, move along the plan, read a new one."""
        if self.global_batch is None:
            return
        if worker_times:
            sizes = self.batch_sizes()
            for worker in range(min(len(sizes), len(worker_times))):  # no zip(strict=): 3.8
                key, took = (worker, sizes[worker]), worker_times[worker]
                if key in self._points or len(self._points) < MAX_POINTS:
                    total, count = self._points.get(key, (0.0, 0))
                    self._points[key] = (total + float(took), count + 1)
        if self._plan:
            self._plan_step += 1
            steps = self._plan[0][1]
            if steps is not None and self._plan_step >= steps and len(self._plan) > 1:
                self._plan.pop(0)
                self._plan_step = 0
        self._read_split()

    def _read_split(self) -> None:
        """Take a new ``split.json`` (one stat per step when it is unchanged)."""
        path = self.dir / SPLIT_FILE
        try:
            st = path.stat()
        except OSError:
            return
        seen = (st.st_mtime_ns, st.st_size)
        if seen == self._split_seen:
            return
        self._split_seen = seen
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            version = int(doc["version"])
            plan = [
                ([int(b) for b in split], None if n is None else int(n)) for split, n in doc["plan"]
            ]
        except (OSError, ValueError, KeyError, TypeError):
            return
        workers = max(self.gpus, 1)
        fits = all(
            len(split) == workers and sum(split) == self.global_batch and min(split) >= 1
            for split, _ in plan
        )
        if version > self._split_version and plan and fits:
            self._split_version = version
            self._plan = plan
            self._plan_step = 0

    def step(
        self,
        step: int,
        steps: int | None = None,
        *,
        force: bool = False,
        worker_times: list[float] | None = None,
    ) -> bool:
        """Report that mini-batch ``step`` (of ``steps``) is done; whether a checkpoint is due.

        Progress reaches the disk at most every ``report_every`` seconds (and
        always with ``force``), so a fast loop is not slowed by it.
        ``worker_times`` are the seconds each worker computed this step (for
        a run started with a global batch): gctl balances the split by them.
        """
        self._next_split(worker_times)
        now = time.monotonic()
        self._recent.append(now)
        last = steps is not None and step >= steps
        if force or last or now - self._last_report >= self._report_every:
            self._last_report = now
            span = self._recent[-1] - self._recent[0]
            progress: dict[str, object] = {
                "step": step,
                "steps": steps,
                "time": time.time(),
                "sdk": SDK_VERSION,
            }
            if len(self._recent) == self._recent.maxlen and span > 0:
                # Only a full window of steps since the start tells a steady rate; before
                # that none, rather than 0 or a figure the start-up still drags down.
                progress["rate"] = (len(self._recent) - 1) / span
                progress["span"] = span
            if last:
                progress["done"] = True
            if self.global_batch is not None:
                progress["batch"] = self._batch_report()
            _write_json(self.dir / PROGRESS_FILE, progress, sync=last)
        return self._asked_checkpoint

    def _batch_report(self) -> dict[str, object]:
        """The ``batch`` entry of ``progress.json``."""
        return {
            "global": self.global_batch,
            "local": self.batch_sizes(),
            "version": self._split_version,
            "points": [
                [worker, local, total / count, count]
                for (worker, local), (total, count) in sorted(self._points.items())
            ],
        }

    def finish(self, step: int | None = None) -> None:
        """Say the job's work is done (its final report), before it exits 0.

        Without it (or a report of the last of ``steps``), an exit 0 is taken
        for an interruption and the job restarts from its checkpoint.
        """
        try:
            last = json.loads((self.dir / PROGRESS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            last = {}
        progress = {k: last[k] for k in ("step", "steps", "rate") if k in last}
        if step is not None:
            progress["step"] = step
        progress.update({"time": time.time(), "sdk": SDK_VERSION, "done": True})
        _write_json(self.dir / PROGRESS_FILE, progress, sync=True)

    def checkpoint(self, state: dict[str, Any]) -> None:
        """Record a checkpoint: ``state`` (JSON-able, with at least ``step``) after the job's files.

        Write model files into :attr:`checkpoint_dir` first; this call then
        makes the checkpoint count, atomically, and clears a SIGUSR1 request.
        """
        step = int(state.get("step", 0))
        record = {"step": step, "state": state, "time": time.time(), "attempt": self.attempt}
        _write_json(self.dir / CHECKPOINT_FILE, record, sync=True)
        self._asked_checkpoint = False


def limit_gpu_memory(limit_mb: int) -> list[str]:
    """Hand a GPU memory limit (MiB per GPU) to the frameworks already imported; those told.

    gctl stops a job seen above its ``--gpu-mem`` (as an OOM kill); a
    framework told the limit refuses the allocation instead, inside the job:
    PyTorch's caching allocator through
    ``torch.cuda.set_per_process_memory_fraction`` on each visible GPU, and
    TensorFlow through a logical device memory limit on each GPU (possible
    only before TensorFlow first uses its GPUs). A framework is never
    imported here (importing TensorFlow alone takes GPU memory): import it
    before :func:`start`, or call this once it is.
    """
    told: list[str] = []
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            total_mb = torch.cuda.get_device_properties(i).total_memory / 2**20
            torch.cuda.set_per_process_memory_fraction(min(1.0, limit_mb / total_mb), i)
        told.append("torch")
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        config = [tf.config.LogicalDeviceConfiguration(memory_limit=limit_mb)]
        try:
            for gpu in tf.config.list_physical_devices("GPU"):
                tf.config.set_logical_device_configuration(gpu, config)
            told.append("tensorflow")
        except RuntimeError:  # its GPUs are in use already: too late to limit them
            pass
    return told


def start(*, listen: bool = True, batch: int | None = None) -> Run:
    """The run of this container, from the ``GCTL_*`` environment; signals taken if asked.

    A first run writes a progress report at once, so gctl knows the job uses
    the SDK even if it is stopped before its first step. ``batch`` is the
    job's global batch, to be split over its GPUs by gctl (:meth:`Run.batch_size`).
    A GPU memory limit (``--gpu-mem``) is handed to the frameworks already
    imported (:func:`limit_gpu_memory`).
    """
    run = Run()
    if run.gpu_mem_mb is not None:
        limit_gpu_memory(run.gpu_mem_mb)
    if batch is not None:
        if batch < max(run.gpus, 1):
            raise ValueError(f"a global batch of {batch} cannot be split over {run.gpus} GPUs")
        run.global_batch = batch
        run._read_split()
    if not (run.dir / PROGRESS_FILE).exists():
        first = {"step": 0, "time": time.time(), "sdk": SDK_VERSION}
        _write_json(run.dir / PROGRESS_FILE, first, sync=False)
    return run.listen() if listen else run
