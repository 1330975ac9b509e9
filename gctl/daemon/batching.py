"""Batch balancing on hosts: profile a data-parallel job's workers, fit curves, split its batch.

Only jobs that give the job SDK their global batch (``job.start(batch=...)``)
and run on two or more GPUs take part; any other job is never profiled or
split. For each such job, after every introspective pass:

1. **Curves.** The SDK reports, per worker, the mean compute time at each
   local batch it ran (``points``). Once every worker was measured at two
   batch sizes, the points of the workers of each GPU model are fitted
   (:func:`gctl.core.batching.fit`) and kept in ``batch_curves`` per job and
   GPU model. A model with no curve of the job's own borrows the newest
   curve of the same kind of job (``--profile`` name, else image and
   command) on that model.
2. **Profile.** A job still missing a curve is sent, once per attempt, a
   short profile plan (:func:`gctl.core.batching.profile_splits`): a few
   splits of the same global batch, each for a few steps, bounded by
   ``profile_steps`` steps and ``profile_seconds`` seconds in all.
3. **Split.** With every curve known, each worker's curve is slowed by the
   predicted slow-down of its GPU when another job runs on it
   (:class:`gctl.core.interference.Interference`: measured co-runs first),
   and the global batch is balanced (:func:`gctl.core.batching.balance`).
   The new split is written (``split.json``, over the host agent's
   ``split-set``) when it is predicted to make a step at least
   ``min_gain`` faster than the current one, with a ``job.split`` event
   saying why. A pack or unpack so changes the split within the pass.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from gctl.core.batching import Curve, balance, fit, profile_splits, step_time
from gctl.core.interference import Interference, job_kind
from gctl.daemon import jobfiles
from gctl.daemon.inflight import Inflight
from gctl.daemon.site import Site
from gctl.hosts.ssh import Target
from gctl.services import events, hostops
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, BatchCurveRow, GpuRow, JobRow, NodeRow, now

PROFILE_STEPS = 30
"""Most steps a job's profile takes, all its splits together."""
PROFILE_SECONDS = 60.0
"""Most seconds a job's profile takes (judged from its reported rate)."""
MIN_GAIN = 0.03
"""Smallest predicted step-time gain (3 %) for which a job's split is changed."""
RESEND_AFTER = 30.0
"""Seconds after which a split the job has not taken is written again."""


@dataclass(frozen=True, slots=True)
class _Worker:
    node: str
    gpu_type: str
    partner_kind: str | None
    """The kind of another job running on this worker's GPU, if any."""


@dataclass(frozen=True, slots=True)
class _Job:
    job_id: int
    attempt: int
    kind: str
    home: str
    workers: tuple[_Worker, ...]


@dataclass(frozen=True, slots=True)
class SplitWrite:
    """A plan to write into a job's directory, and why."""

    job_id: int
    attempt: int
    node: str
    version: int
    plan: list[list[Any]]
    why: str


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """Bounds of the profile and the least gain worth a new split."""

    profile_steps: int = PROFILE_STEPS
    profile_seconds: float = PROFILE_SECONDS
    min_gain: float = MIN_GAIN


class Balancer:
    """What has been sent to which job, from pass to pass."""

    def __init__(self, options: BatchOptions | None = None) -> None:
        """Nothing sent yet."""
        self.options = options or BatchOptions()
        self._sent: dict[int, tuple[int, int, float]] = {}
        """Job to (attempt, version, when) of the last plan written."""
        self._profiled: set[tuple[int, int]] = set()

    def decide(
        self,
        site: Site,
        reports: Mapping[int, tuple[int, jobfiles.Report]],
        predict: Interference,
    ) -> list[SplitWrite]:
        """The plans to write now (curves fitted on the way are saved).

        ``reports`` are the latest job reports, by job, with the attempt each
        was read for.
        """
        out: list[SplitWrite] = []
        running = _running(site)
        self._sent = {j: v for j, v in self._sent.items() if j in running}
        for job in running.values():
            attempt, report = reports.get(job.job_id, (None, None))
            if attempt != job.attempt:
                continue
            batch = _batch(report, len(job.workers))
            if batch is None:
                continue
            write = self._decide_one(site, job, batch, report, predict)
            if write is not None:
                self._sent[job.job_id] = (job.attempt, write.version, now())
                out.append(write)
        return out

    def _decide_one(
        self,
        site: Site,
        job: _Job,
        batch: dict[str, Any],
        report: jobfiles.Report | None,
        predict: Interference,
    ) -> SplitWrite | None:
        sent = self._sent.get(job.job_id)
        version = max(int(batch["version"]), sent[1] if sent and sent[0] == job.attempt else 0)
        waiting = sent is not None and sent[0] == job.attempt and batch["version"] < sent[1]
        if waiting and sent is not None and now() - sent[2] < RESEND_AFTER:
            return None  # not taken yet: the job reads it at its next step
        curves = _curves(site, job, batch)
        total = int(batch["global"])
        types = [w.gpu_type for w in job.workers]
        missing = sorted({t for t in types if t not in curves})
        if missing:
            if (job.job_id, job.attempt) in self._profiled:
                return None
            self._profiled.add((job.job_id, job.attempt))
            rate = (report.progress or {}).get("rate") if report else None
            splits = profile_splits(total, len(types))
            steps = self.options.profile_steps // len(splits)
            if isinstance(rate, int | float) and rate > 0:
                steps = min(steps, int(self.options.profile_seconds * rate / len(splits)))
            steps = max(steps, 2)
            plan: list[list[Any]] = [[s, steps] for s in splits]
            plan.append([splits[0], None])
            why = (
                f"profiling {len(splits)} splits x {steps} steps: no batch curve yet on"
                f" {', '.join(missing)}"
            )
            return SplitWrite(job.job_id, job.attempt, job.home, version + 1, plan, why)
        slow = [_slowdown(predict, job.kind, w) for w in job.workers]
        effective = [
            curves[w.gpu_type][0].slowed(s) for w, s in zip(job.workers, slow, strict=True)
        ]
        split = balance(total, effective)
        current = [int(b) for b in batch["local"]]
        if split == current:
            return None
        before, after = step_time(current, effective), step_time(split, effective)
        if before / after - 1 < self.options.min_gain:
            return None
        shared = "".join(
            f"; worker {i} shares its GPU ({s:.2f}x predicted)"
            for i, s in enumerate(slow)
            if s != 1.0
        )
        sources = ", ".join(sorted({f"{t}: {curves[t][1]}" for t in types}))
        why = (
            f"split {current} -> {split} of {total}: predicted {before:.3f} -> {after:.3f} s/step"
            f" (curves {sources}{shared})"
        )
        return SplitWrite(job.job_id, job.attempt, job.home, version + 1, [[split, None]], why)

    def send(self, site: Site, inflight: Inflight, writes: list[SplitWrite]) -> None:
        """Write each plan on its job's node (in the background) and record why."""
        if not writes:
            return
        with transaction(site.store.engine, write=True) as s:
            rows = {
                r.name: r
                for r in s.scalars(
                    select(NodeRow).where(NodeRow.name.in_({w.node for w in writes}))
                )
            }
            for w in writes:
                events.record(s, "job.split", f"job {w.job_id}: {w.why}", job_id=w.job_id,
                              node=w.node, data={"version": w.version, "plan": w.plan})  # fmt: skip
            targets = {name: (hostops.target(r), r) for name, r in rows.items()}
        for w in writes:
            if w.node not in targets:
                continue
            target, row = targets[w.node]
            request = {
                "dir": site.job_dir(row, w.job_id, w.attempt),
                "split": {"version": w.version, "plan": w.plan},
            }
            inflight.submit(
                f"split job {w.job_id}", _writer(site, target, request), jobs=(w.job_id,)
            )


def _writer(site: Site, target: Target, request: dict[str, Any]) -> Callable[[], object]:
    """The call writing one split on its host."""
    return lambda: jobfiles.run_agent(site.pool, target, "split-set", request)


def _batch(report: jobfiles.Report | None, workers: int) -> dict[str, Any] | None:
    """The report's ``batch`` entry when it is well formed and the job has workers to balance."""
    if report is None or not report.progress or workers < 2:
        return None
    batch = report.progress.get("batch")
    if not isinstance(batch, dict):
        return None
    total, local, version, points = (batch.get(k) for k in ("global", "local", "version", "points"))
    ok = (
        isinstance(total, int)
        and isinstance(version, int)
        and isinstance(local, list)
        and len(local) == workers
        and all(isinstance(b, int) for b in local)
        and isinstance(points, list)
        and total >= workers
    )
    return batch if ok else None


def _running(site: Site) -> dict[int, _Job]:
    """Running jobs with their workers (GPUs in node, index order), models and partners."""
    with transaction(site.store.engine, write=False) as s:
        rows = s.execute(
            select(
                JobRow.id,
                JobRow.attempt,
                JobRow.profile,
                JobRow.image,
                JobRow.command,
                NodeRow.name,
                GpuRow.index,
                GpuRow.model,
                GpuRow.id,
            )
            .join(AllocationRow, AllocationRow.job_id == JobRow.id)
            .join(GpuRow, GpuRow.id == AllocationRow.gpu_id)
            .join(NodeRow, NodeRow.id == GpuRow.node_id)
            .where(JobRow.state == "RUNNING")
            .order_by(JobRow.id, NodeRow.name, GpuRow.index)
        ).all()
    kinds: dict[int, str] = {}
    on_gpu: dict[int, list[int]] = defaultdict(list)
    gpus: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    attempts: dict[int, int] = {}
    for job_id, attempt, profile, image, command, node, _, model, gpu_id in rows:
        kinds[job_id] = job_kind(profile, image, command)
        attempts[job_id] = attempt
        on_gpu[gpu_id].append(job_id)
        gpus[job_id].append((node, model, gpu_id))
    out: dict[int, _Job] = {}
    for job_id, held in gpus.items():
        workers = []
        for node, model, gpu_id in held:
            others = [j for j in on_gpu[gpu_id] if j != job_id]
            workers.append(_Worker(node, model, kinds[others[0]] if others else None))
        out[job_id] = _Job(job_id, attempts[job_id], kinds[job_id], held[0][0], tuple(workers))
    return out


def _curves(site: Site, job: _Job, batch: dict[str, Any]) -> dict[str, tuple[Curve, str]]:
    """A curve per GPU model of the job's workers: its own (fitted now or kept), else borrowed."""
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    measured: dict[str, set[int]] = defaultdict(set)
    for item in batch["points"]:
        if not (isinstance(item, list) and len(item) == 4):
            continue
        worker, local, took, _ = item
        if isinstance(worker, int) and 0 <= worker < len(job.workers):
            w = job.workers[worker]
            if w.partner_kind is None and isinstance(local, int) and isinstance(took, int | float):
                points[w.gpu_type].append((float(local), float(took)))
                measured[w.gpu_type].add(local)
    out: dict[str, tuple[Curve, str]] = {}
    with transaction(site.store.engine, write=True) as s:
        for gpu_type, pts in points.items():
            curve = fit(pts) if len(measured[gpu_type]) >= 2 else None
            if curve is None:
                continue
            row = s.scalar(
                select(BatchCurveRow).where(
                    BatchCurveRow.job_id == job.job_id, BatchCurveRow.gpu_type == gpu_type
                )
            )
            if row is None:
                row = BatchCurveRow(job_id=job.job_id, gpu_type=gpu_type, kind=job.kind)
                s.add(row)
            row.alpha, row.beta, row.points, row.at = curve.alpha, curve.beta, pts, now()
            out[gpu_type] = (curve, "measured")
        for gpu_type in {w.gpu_type for w in job.workers} - set(out):
            own = s.scalar(
                select(BatchCurveRow).where(
                    BatchCurveRow.job_id == job.job_id, BatchCurveRow.gpu_type == gpu_type
                )
            )
            if own is not None:
                out[gpu_type] = (Curve(own.alpha, own.beta), "measured")
                continue
            borrowed = s.scalar(
                select(BatchCurveRow)
                .where(BatchCurveRow.kind == job.kind, BatchCurveRow.gpu_type == gpu_type)
                .order_by(BatchCurveRow.at.desc())
                .limit(1)
            )
            if borrowed is not None:
                out[gpu_type] = (
                    Curve(borrowed.alpha, borrowed.beta),
                    f"borrowed from job {borrowed.job_id}",
                )
    return out


def _slowdown(predict: Interference, kind: str, worker: _Worker) -> float:
    """How much slower the worker's GPU makes it: 1.0 alone, else the predicted slow-down."""
    if worker.partner_kind is None:
        return 1.0
    return predict.predictor(worker.gpu_type).slowdown(kind, worker.partner_kind).slowdown
