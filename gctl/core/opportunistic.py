"""Opportunistic jobs (TGS): placed where production leaves room, evicted when production needs it.

An opportunistic job is a *guest* of the cluster state (see
:mod:`gctl.core.state`): no policy sees it, so it never changes what a
policy decides for production jobs. Around every pass of the policy,
:class:`WithGuests`

1. **evicts** (requeues, from its checkpoint where it has one) each guest
   whose GPUs production now needs: a production job was placed on them
   (any but the one the guest was placed beside), the production job it
   shares them with stopped being alone there, or
   the two no longer fit the GPUs' memory together (as measured: a
   production job whose memory grows pushes the guest out, never the
   reverse). The evictions come first in the pass's decisions, so a driver
   carries them out before it starts the production job that caused them;
2. **places** waiting guests, highest priority then oldest first: on idle
   GPUs (the best-connected set of the node with the fewest idle ones, so
   big holes stay for production), else, where ``colocate`` allows, beside
   a production job alone on a set of the guest's size that leaves at least
   ``min_idle`` of its GPUs idle (measured utilisation) and the guest's
   memory free. Beside a production job the guest runs under the adaptive
   rate control of :mod:`gctl.core.tgs`, which its driver applies.

Everything here is pure: it reads and commits to the
:class:`~gctl.core.state.ClusterState` it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from gctl.core import memory, placement
from gctl.core.decisions import Decision, Place, Queue, Requeue
from gctl.core.model import GpuRef, JobStatus, ShareMode
from gctl.core.policy import Policy, Steady, Waking
from gctl.core.state import ClusterState, GroupKey, JobState

_QUEUED = "queued: opportunistic"


@dataclass(frozen=True, slots=True)
class Sharing:
    """Where opportunistic jobs may run.

    ``colocate``: beside production jobs, not only on idle GPUs (needs a
    driver that throttles the guest). ``min_idle``: the least fraction of
    its GPUs' time a production job must leave idle, as measured, for a
    guest to join it.
    """

    colocate: bool = True
    min_idle: float = 0.2

    def __post_init__(self) -> None:
        """Refuse a ``min_idle`` outside [0, 1]."""
        if not 0.0 <= self.min_idle <= 1.0:
            raise ValueError(f"min_idle must be in [0, 1], got {self.min_idle}")


def evict(state: ClusterState, now: float, sharing: Sharing) -> list[Decision]:
    """Requeue every guest whose GPUs production needs now; committed to ``state``."""
    out: list[Decision] = []
    for guest in list(state.guests):
        why = _conflict(state, state.jobs[guest], sharing)
        if why is not None:
            out.append(Requeue(guest, f"evicted: {why}"))
    return state.commit(out, now)


def _conflict(state: ClusterState, guest: JobState, sharing: Sharing) -> str | None:
    """Why ``guest`` must leave its GPUs now (None: it may stay)."""
    over = state.groups_over(guest.gpus)
    if not over:
        return None
    hosts = [m for key in over for m in state.members(key)]
    if not sharing.colocate or hosts != [guest.beside] or over != [guest.gpus]:
        return f"production job(s) {', '.join(hosts)} need its GPUs"
    return _memory_short(state, state.jobs[hosts[0]], guest)


def _memory_short(state: ClusterState, host: JobState, guest: JobState) -> str | None:
    """Why ``guest`` does not fit beside ``host`` in GPU memory (None: it fits)."""
    have = memory.gpu_mem(state, host.gpus)
    used, need = memory.job_mem(host), memory.job_mem(guest)
    if used + need <= have:
        return None
    return (
        f"GPU memory: production job {host.id} uses {used} MB of {have} MB,"
        f" the opportunistic job needs {need} MB"
    )


def place(state: ClusterState, now: float, sharing: Sharing) -> list[Decision]:
    """Put waiting guests on idle GPUs, else beside production jobs that leave room; committed.

    Guests go highest priority, then oldest, first; once one of a size finds
    no GPUs, the later ones of that size are not tried in this pass.
    """
    if not state.guest_queue:
        return []
    taken: dict[str, int] = {}
    for node, idx in state.guest_on:
        taken[node] = taken.get(node, 0) | 1 << idx
    heads = {size: js for size in state.guest_sizes() if (js := state.next_guest(size))}
    hosts: dict[int, list[GroupKey]] = {}
    out: list[Decision] = []
    while heads:
        count, js = min(heads.items(), key=lambda e: (-int(e[1].spec.priority), e[1].seq))
        gpus = _idle_set(state, count, taken)
        reason = "idle GPUs, until production needs them"
        if gpus is None and sharing.colocate:
            if count not in hosts:
                hosts[count] = _hosts(state, count, sharing)
            gpus = _host_for(state, js, hosts[count])
            if gpus is not None:
                host = state.members(gpus)[0]
                reason = f"beside production job {host}, rate-limited to what it leaves"
        if gpus is None:
            del heads[count]
            if not js.reason.startswith(_QUEUED):
                room = ", no production job leaves room" if sharing.colocate else ""
                out += state.commit([Queue(js.id, f"{_QUEUED}: no idle GPUs{room}")], now)
            continue
        for node, idx in gpus:
            taken[node] = taken.get(node, 0) | 1 << idx
        out += state.commit([Place(js.id, gpus, ShareMode.OPPORTUNISTIC, reason)], now)
        nxt = state.next_guest(count)
        if nxt is None:
            del heads[count]
        else:
            heads[count] = nxt
    return out


def _idle_set(state: ClusterState, count: int, taken: dict[str, int]) -> GroupKey | None:
    """The best-connected ``count`` idle GPUs without a guest, or None when there are too few.

    One node when any fits (the one with the fewest such GPUs), else as few
    nodes as possible.
    """
    if state.total_free < count:
        return None
    open_masks = [(ns, ns.free_mask & ~taken.get(ns.name, 0)) for ns in state.nodes_with_free(1)]
    fits = sorted(
        ((mask.bit_count(), ns.name, ns, mask) for ns, mask in open_masks if mask),
        key=lambda e: (e[0], e[1]),
    )
    for idle, _, ns, mask in fits:
        if idle >= count:
            found = placement.node_set(ns, count, mask)
            if found is not None:
                return found
    if sum(e[0] for e in fits) < count:
        return None
    chosen: list[GpuRef] = []
    for idle, _, ns, mask in reversed(fits):
        chosen.extend(placement.node_set(ns, min(idle, count - len(chosen)), mask) or ())
        if len(chosen) == count:
            return tuple(sorted(chosen))
    return None


def _hosts(state: ClusterState, count: int, sharing: Sharing) -> list[GroupKey]:
    """Sets of ``count`` GPUs a guest may join, most idle first.

    One running production job is alone there, measured, leaving at least
    ``min_idle`` of the GPUs idle, and no guest is there yet.
    """
    found: list[tuple[float, GroupKey]] = []
    for key, members in state.groups.items():
        if len(key) != count or len(members) != 1:
            continue
        host = state.jobs[members[0]]
        seen = host.observed
        if host.status is not JobStatus.RUNNING or seen is None:
            continue
        if 1.0 - seen.gpu_util >= sharing.min_idle and not state.guests_over(key):
            found.append((seen.gpu_util, key))
    found.sort()
    return [key for _, key in found]


def _host_for(state: ClusterState, guest: JobState, hosts: list[GroupKey]) -> GroupKey | None:
    """The first of ``hosts`` whose memory also holds ``guest``, taken off the list."""
    for i, key in enumerate(hosts):
        if _memory_short(state, state.jobs[state.members(key)[0]], guest) is None:
            del hosts[i]
            return key
    return None


class WithGuests:
    """A policy with opportunistic jobs around it: evictions first, its decisions, placements.

    The simulator and the daemon wrap whichever policy they run in this, so
    every policy, built-in or plugin, gets the same opportunistic jobs.
    """

    def __init__(self, inner: Policy, sharing: Sharing | None = None) -> None:
        """Wrap ``inner``; ``sharing`` says where guests may run (default: :class:`Sharing`)."""
        self.inner = inner
        self.name = inner.name
        self.sharing = sharing or Sharing()
        # a protocol check is slow: made once here, not on every event
        self._wake_at = inner.wake_at if isinstance(inner, Waking) else None

    def schedule(self, state: ClusterState, now: float) -> list[Decision]:
        """The policy's reactive pass, with guests evicted and placed around it."""
        return self._around(state, now, self.inner.schedule(state, now))

    def introspect(self, state: ClusterState, now: float) -> list[Decision]:
        """The policy's periodic pass, with guests evicted and placed around it."""
        return self._around(state, now, self.inner.introspect(state, now))

    def wants_introspection(self, state: ClusterState) -> bool:
        """When the policy wants a pass, or guests run (production memory may have grown)."""
        return self.inner.wants_introspection(state) or bool(state.guests)

    def steady(self) -> bool:
        """The policy's answer: guests running or queued make a job wait (the daemon checks)."""
        return isinstance(self.inner, Steady) and self.inner.steady()

    def wake_at(self, state: ClusterState, now: float) -> float | None:
        """The policy's own next moment: guests only move on events or passes the policy has."""
        if self._wake_at is not None:
            return self._wake_at(state, now)
        return now if self.inner.wants_introspection(state) else None

    def guests(self, state: ClusterState, now: float) -> list[Decision]:
        """Evict and place guests only, without a pass of the policy.

        For a driver that has just measured production jobs: new samples may
        open room beside them, or push a guest out.
        """
        return self._around(state, now, [])

    def _around(self, state: ClusterState, now: float, decided: list[Decision]) -> list[Decision]:
        if not state.guests and not state.guest_queue:
            return decided
        evicted = evict(state, now, self.sharing)
        return evicted + decided + place(state, now, self.sharing)
