"""The job performance model: how fast a job progresses where the scheduler put it.

A job's duration in the trace is its ideal run time on the GPUs it asked for,
alone and well placed. Its speed (ideal seconds of work per second) is 1.0
there and is multiplied by:

- a locality factor when its GPUs span PCIe switches, sockets or nodes
  further apart than they need to (per model,
  :func:`gctl.sim.profiles.locality_factor`, over the factor of the tightest
  set the cluster offers a job of its size: the trace's duration was
  measured on such a set, so an 8-GPU job on a whole 8-GPU node or a 16-GPU
  job on two whole nodes runs at full speed);
- its packed speed when it shares its GPUs with a concurrently running job
  (measured pair throughputs, :func:`gctl.sim.profiles.packed_speeds`);
- an elastic factor ``(held / asked) ** elastic_exponent`` when it was grown
  or shrunk;
- for a production job with an opportunistic guest on its GPUs, and for
  that guest, their speeds under TGS rate control
  (:func:`gctl.sim.sharing.shared`; a guest on idle GPUs runs as any job).

Suspend/resume and migration cost the job the seconds Gandiva measured
(:func:`gctl.sim.profiles.suspend_resume_cost_s`, ``migration_cost_s``).
Every effect can be switched off; with all off the simulator runs the plain
model of the Tiresias and Muri simulators (fixed durations, no packing gain,
no locality effects, free preemption).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gctl.core.model import JobStatus
from gctl.core.state import ClusterState, JobState
from gctl.core.tgs import RateControl
from gctl.sim import profiles, sharing


@dataclass(frozen=True, slots=True)
class PerfConfig:
    """Which effects the performance model applies."""

    locality: bool = True
    packing: bool = True
    overheads: bool = True
    elastic: bool = True
    elastic_exponent: float = 0.8
    control: RateControl = field(default_factory=RateControl)
    """The rate controller a guest beside a production job runs under."""

    @classmethod
    def plain(cls) -> PerfConfig:
        """The Tiresias/Muri model: every effect off."""
        return cls(locality=False, packing=False, overheads=False, elastic=False)


def speed(state: ClusterState, js: JobState, prof: profiles.ModelProfile, cfg: PerfConfig) -> float:
    """Ideal seconds of work the job does per second right now (0 when not running)."""
    if js.status is not JobStatus.RUNNING:
        return 0.0
    rate = 1.0
    if cfg.locality:
        rate *= prof.locality[state.spread(js.gpus)] / prof.locality[state.best_spread(js.held)]
    if js.held != js.spec.gpus:
        ratio = js.held / js.spec.gpus
        rate *= ratio**cfg.elastic_exponent if cfg.elastic else min(ratio, 1.0)
    members = state.groups.get(js.gpus, ())
    if len(members) > 1:
        rate *= _share(state, js, members, cfg)
    beside = _beside(state, js)
    if beside is not None:
        host, guest = (beside, js) if js.opportunistic else (js, beside)
        both = sharing.shared(host.spec.profile, guest.spec.profile, cfg.control)
        rate *= both.guest if js.opportunistic else both.production
    return rate


def _beside(state: ClusterState, js: JobState) -> JobState | None:
    """The job running beside ``js`` under rate control: its guest, or its running host."""
    if js.opportunistic:
        host = state.host_of(js.id)
        members = state.groups[host] if host is not None else ()
        if len(members) == 1 and state.jobs[members[0]].status is JobStatus.RUNNING:
            return state.jobs[members[0]]
        return None
    guest_id = state.guest_on.get(js.gpus[0]) if js.gpus else None
    if guest_id is None or len(state.groups.get(js.gpus, ())) != 1:
        return None
    guest = state.jobs[guest_id]
    return guest if guest.gpus == js.gpus and guest.status is JobStatus.RUNNING else None


def _share(state: ClusterState, js: JobState, members: list[str], cfg: PerfConfig) -> float:
    """Speed factor from running concurrently with the other members of a pack."""
    running = [m for m in members if state.jobs[m].status is JobStatus.RUNNING]
    if len(running) <= 1:
        return 1.0
    if cfg.packing and len(running) == 2:
        other = state.jobs[running[0] if running[1] == js.id else running[1]]
        pair = profiles.packed_speeds(js.spec.profile, other.spec.profile)
        if pair is not None:
            return pair[0]
    return 1.0 / len(running)


def resume_cost(model: str | None, cfg: PerfConfig) -> float:
    """Seconds of progress a suspend/resume cycle costs a job of ``model``."""
    return profiles.suspend_resume_cost_s(model) if cfg.overheads else 0.0


def move_cost(model: str | None, cfg: PerfConfig) -> float:
    """Seconds of progress a checkpoint-restore move costs a job of ``model``."""
    return profiles.migration_cost_s(model) if cfg.overheads else 0.0
