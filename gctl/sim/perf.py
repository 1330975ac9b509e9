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
- the speed of its workers (one per GPU), each the relative speed of its
  GPU's type (:func:`gctl.sim.profiles.relative_speed`: the duration was
  measured on V100s) times its packed speed when it shares its GPUs with a
  concurrently running job (measured pair throughputs on that type,
  :func:`gctl.sim.profiles.packed_speeds`), combined as below;
- an elastic factor ``(held / asked) ** elastic_exponent`` when it was grown
  or shrunk;
- for a production job with an opportunistic guest on its GPUs, and for
  that guest, their speeds under TGS rate control
  (:func:`gctl.sim.sharing.shared`; a guest on idle GPUs runs as any job).

Workers on GPUs of different speeds
-----------------------------------
A data-parallel job's iteration waits for its slowest worker. Worker ``i``
runs at ``r_i`` (its GPU type's relative speed times its packed speed). With
the global batch ``B`` split equally over the ``n`` workers, the job runs at
``min_i r_i``: the straggler sets the pace. With the batch balanced
(:attr:`PerfConfig.balance`), worker ``i`` gets ``b_i`` samples so that the
iteration times are equal. Take a worker's iteration time as linear in its
batch, ``t_i(b) = (alpha + beta * b) / r_i`` (a fixed part and a per-sample
part, both measured on a V100). Equal ``t_i = t`` means
``b_i = (t * r_i - alpha) / beta``; summing, ``B = (t * sum_i r_i - n * alpha)
/ beta``, so ``t = (B * beta + n * alpha) / sum_i r_i``. On ``n`` V100s the
same batch takes ``alpha + beta * B / n = (B * beta + n * alpha) / n``, so
the balanced job runs at ``sum_i r_i / n = mean_i r_i`` relative to V100s,
whatever ``alpha`` and ``beta`` are (as long as every share ``b_i`` comes
out non-negative, which a fixed part ``alpha`` small beside ``beta * B / n``
ensures). On GPUs of one type both rules give that type's ``r``. Packing
is per GPU set (all of a packed job's GPUs share the same partner), so the
packed speed differs between workers only through the GPU type's pair
table.

Suspend/resume and migration cost the job the seconds Gandiva measured
(:func:`gctl.sim.profiles.suspend_resume_cost_s`, ``migration_cost_s``).
Every effect can be switched off; with all off the simulator runs the plain
model of the Tiresias and Muri simulators (fixed durations, no packing gain,
no locality effects, free preemption, every GPU a V100). On a cluster of
V100s only, the GPU-type effect and the batch split change nothing.
"""

from __future__ import annotations

from collections import Counter
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
    gpu_types: bool = True
    """Whether a GPU's type sets its speed; off, every GPU counts as a V100."""
    balance: bool = True
    """Whether a job on GPUs of different speeds balances its batch over them (else equal split)."""

    @classmethod
    def plain(cls) -> PerfConfig:
        """The Tiresias/Muri model: every effect off, every GPU a V100."""
        return cls(locality=False, packing=False, overheads=False, elastic=False, gpu_types=False)


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
    rate *= _workers(state, js, cfg)
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


def _workers(state: ClusterState, js: JobState, cfg: PerfConfig) -> float:
    """Speed of the job's workers together: GPU type and packing, straggler or balanced.

    Each worker runs at its GPU type's relative speed times its packed speed
    on that type; the job at their minimum (equal split) or their mean
    (balanced batch), as the module docstring derives.
    """
    members = state.groups.get(js.gpus, ())
    running = [m for m in members if state.jobs[m].status is JobStatus.RUNNING]
    if not cfg.gpu_types:
        return _share(state, js, running, profiles.DEFAULT_GPU_TYPE, cfg)
    first = state.gpu_type(js.gpus[0])
    if all(state.gpu_type(gpu) == first for gpu in js.gpus):  # the common case, made cheap
        return _worker(state, js, running, first, cfg)
    counts = Counter(state.gpu_type(gpu) for gpu in js.gpus)
    rates = {kind: _worker(state, js, running, kind, cfg) for kind in counts}
    if cfg.balance:
        return sum(counts[kind] * rate for kind, rate in rates.items()) / len(js.gpus)
    return min(rates.values())


def type_speed(state: ClusterState, js: JobState, cfg: PerfConfig) -> float:
    """How fast the job's GPU types run it alone relative to V100s: the mean over its GPUs."""
    if not cfg.gpu_types or not js.gpus:
        return 1.0
    return sum(profiles.relative_speed(js.spec.profile, state.gpu_type(g)) for g in js.gpus) / len(
        js.gpus
    )


def busy_util(util: float, type_speed: float) -> float:
    """GPU utilisation of a job of V100 utilisation ``util`` on GPUs ``type_speed`` as fast.

    Its GPU stage takes ``1 / type_speed`` as long and the rest (input, CPU)
    as long as before: ``(u / r) / (u / r + 1 - u)``. A slower GPU is busier.
    """
    if type_speed == 1.0 or util <= 0.0:
        return util
    gpu = util / type_speed
    return gpu / (gpu + 1.0 - util)


def _worker(
    state: ClusterState, js: JobState, running: list[str], gpu_type: str, cfg: PerfConfig
) -> float:
    """Speed of one worker of ``js`` on a GPU of ``gpu_type`` (a spec's name, e.g. ``K80``).

    Its type's relative speed times its packed speed from that type's pair
    table; a type without data packs as a V100.
    """
    table = profiles.data_gpu_type(gpu_type) or profiles.DEFAULT_GPU_TYPE
    share = _share(state, js, running, table, cfg)
    return profiles.relative_speed(js.spec.profile, gpu_type) * share


def _share(
    state: ClusterState, js: JobState, running: list[str], gpu_type: str, cfg: PerfConfig
) -> float:
    """Speed factor on a GPU of ``gpu_type`` (a data key) from the pack's other ``running`` jobs."""
    if len(running) <= 1:
        return 1.0
    if cfg.packing and len(running) == 2:
        other = state.jobs[running[0] if running[1] == js.id else running[1]]
        pair = profiles.packed_speeds(js.spec.profile, other.spec.profile, gpu_type=gpu_type)
        if pair is not None:
            return pair[0]
    return 1.0 / len(running)


def resume_cost(model: str | None, cfg: PerfConfig) -> float:
    """Seconds of progress a suspend/resume cycle costs a job of ``model``."""
    return profiles.suspend_resume_cost_s(model) if cfg.overheads else 0.0


def move_cost(model: str | None, cfg: PerfConfig) -> float:
    """Seconds of progress a checkpoint-restore move costs a job of ``model``."""
    return profiles.migration_cost_s(model) if cfg.overheads else 0.0
