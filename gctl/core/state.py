"""The scheduler's working model of a cluster: who holds which GPUs, and indexes to find room fast.

GPUs are held by *groups*: the jobs resident on one exact GPU set. A group of
one job is exclusive; a group whose members all run is a pack; otherwise its
members take turns (time slicing). Groups never overlap, which keeps node
load, free GPUs and affinity cheap to maintain.

Opportunistic jobs (TGS) are *guests*, kept beside that model: a guest
holds no group, counts in no free count, load or queue a policy reads, and
so never changes what a policy decides for production jobs. At most one
guest is on a GPU; it is on idle GPUs or on exactly the GPU set of a
production group (:mod:`gctl.core.opportunistic` decides which, and evicts
it when production needs the GPUs).

A policy reads this model and commits each decision to it with
:meth:`ClusterState.apply` as it takes it, so later decisions in the same
pass see earlier ones. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from gctl.core.decisions import (
    Decision,
    Grow,
    Migrate,
    Pack,
    Place,
    Queue,
    Requeue,
    Resume,
    Shrink,
    Suspend,
    Unpack,
)
from gctl.core.interference import Interference
from gctl.core.model import (
    Cluster,
    GpuRef,
    JobClass,
    JobSpec,
    JobStatus,
    Node,
    Observed,
    ShareMode,
)
from gctl.core.topology import Spread, Topology

GroupKey = tuple[GpuRef, ...]
"""A group is named by its sorted GPU set."""


class StateError(ValueError):
    """A decision or event that does not fit the current state."""


@dataclass(slots=True)
class JobState:
    """A live job as the scheduler tracks it."""

    spec: JobSpec
    seq: int = 0
    status: JobStatus = JobStatus.PENDING
    gpus: GroupKey = ()
    since: float = 0.0
    first_run: float | None = None
    last_resumed: float = 0.0
    observed: Observed | None = None
    solo_rate: float | None = None
    packed_at: float | None = None
    resized_at: float | None = None
    moves: int = 0
    reason: str = ""
    attained: float = 0.0
    """GPU-seconds of service banked up to ``last_resumed`` (see :meth:`attained_at`)."""
    beside: str | None = None
    """A guest: the production job it was placed beside (None: placed on idle GPUs)."""
    service_base: float = 0.0
    """Attained service at the job's last starvation promotion: least-attained-service
    policies rank the job by the service it had since (:mod:`gctl.core.las`)."""
    id: str = field(init=False, repr=False, compare=False)
    """The job id, the spec's (a plain attribute: it is read on every hot path)."""

    def __post_init__(self) -> None:
        """Copy the job id out of the spec."""
        self.id = self.spec.id

    @property
    def opportunistic(self) -> bool:
        """Whether the job is opportunistic: a guest, kept out of the production model."""
        return self.spec.job_class is JobClass.OPPORTUNISTIC

    @property
    def held(self) -> int:
        """GPUs the job holds now (differs from the spec when grown or shrunk)."""
        return len(self.gpus)

    def attained_at(self, now: float) -> float:
        """GPU-seconds the job has run so far (GPUs held x time running), as of ``now``."""
        if self.status is JobStatus.RUNNING:
            return self.attained + len(self.gpus) * max(now - self.last_resumed, 0.0)
        return self.attained

    def bank(self, now: float) -> None:
        """Add the running stretch that ends at ``now`` to :attr:`attained`."""
        if self.status is JobStatus.RUNNING:
            self.attained = self.attained_at(now)
            self.last_resumed = max(self.last_resumed, now)


@dataclass(slots=True)
class NodeState:
    """One node's occupancy."""

    node: Node
    topo: Topology
    group_of: list[GroupKey | None]
    free_mask: int
    size: int
    load: int = 0
    affinity: int = 0
    up: bool = True
    drained_by: dict[str, None] = field(default_factory=dict)
    groups: dict[GroupKey, None] = field(default_factory=dict)
    name: str = field(init=False, repr=False, compare=False)
    """The node name, the node's (a plain attribute: it is read on every hot path)."""

    def __post_init__(self) -> None:
        """Copy the node name out of the node."""
        self.name = self.node.name

    @property
    def open(self) -> bool:
        """Whether new work may land here: up and not drained."""
        return self.up and not self.drained_by

    @property
    def free(self) -> int:
        """GPUs nobody holds."""
        return self.free_mask.bit_count()

    @property
    def height(self) -> float:
        """Gandiva node height: GPUs allocated to resident jobs over GPUs present."""
        return self.load / self.size if self.size else 0.0


class ClusterState:
    """Mutable scheduler model of one cluster and its live jobs."""

    def __init__(self, cluster: Cluster) -> None:
        """Start with every node empty and no jobs."""
        self.nodes: dict[str, NodeState] = {}
        self.jobs: dict[str, JobState] = {}
        self.groups: dict[GroupKey, list[str]] = {}
        self.shared: dict[GroupKey, None] = {}
        self.pending: dict[tuple[int, int], dict[str, int]] = {}
        """Waiting jobs by (priority, size), in arrival order, with the stamps of their queueing."""
        self.dirty: dict[GroupKey, None] = {}
        self.scattered: dict[GroupKey, None] = {}
        self.elastic: dict[str, None] = {}
        self.backlog: dict[int, int] = {}
        """GPUs asked for by the unfinished jobs of each size (GPU count), by size."""
        self.changes = 0
        """Counts every event and decision applied, but those of guests: equal counts mean
        nothing changed in what a policy sees."""
        self.samples = 0
        """Counts the profile samples recorded (:meth:`observe`)."""
        self.node_events = 0
        """Counts nodes gone down (:meth:`node_down`), which requeue their jobs."""
        self.touched: dict[GroupKey, int] = {}
        """For each GPU set in use, a stamp that grows whenever its jobs or their states
        change: an equal stamp means what a policy worked out about the set still holds."""
        self.queued: dict[tuple[int, int], int] = {}
        """The same kind of stamp for each bucket of :attr:`pending`: it grows whenever
        the bucket's jobs change."""
        self.guests: dict[str, None] = {}
        """Opportunistic jobs on GPUs, in placement order."""
        self.guest_queue: dict[str, None] = {}
        """Opportunistic jobs waiting, in no particular order (see :meth:`next_guest`)."""
        self._guest_heaps: dict[int, list[tuple[int, int, str]]] = {}
        self.guest_on: dict[GpuRef, str] = {}
        """The guest on each GPU that has one."""
        self.work_done: Callable[[str], float | None] | None = None
        """The fraction of a job's work done (0..1) where the driver knows it (the simulator
        from its model, the daemon from the job SDK's step/steps), for policies that
        estimate remaining work; None: nothing known."""
        self.cached: dict[str, frozenset[str]] = {}
        """The datasets each node caches (by node name): placement prefers, among nodes
        equally good, those holding more of a job's datasets."""
        self.interference: Interference | None = None
        """Predicted slow-downs of jobs sharing a GPU, handed in by the driver (daemon or
        simulator) for the policy's placement choices; None: nothing predicted."""
        self._touches = 0
        self._seq = 0
        self.total_free = 0
        self.max_size = 0
        self._by_aff_height: dict[int, dict[float, dict[str, None]]] = {}
        self._by_free: dict[int, dict[str, None]] = {}
        self._keys: dict[str, tuple[int, float, int]] = {}
        self._slice_index: dict[tuple[int, int, int], dict[float, dict[str, None]]] = {}
        """Time-slice targets by (GPU count, top priority, members of the node's
        fewest-member such set), then node height."""
        self._slice_keys: dict[str, tuple[float, dict[tuple[int, int], tuple[int, GroupKey]]]] = {}
        self._slice_stale: dict[str, None] = {}
        self._slice_group: dict[GroupKey, tuple[tuple[int, int], int]] = {}
        self._stale_groups: dict[GroupKey, None] = {}
        self._waiting: dict[int, list[tuple[int, int, str]]] = {}
        self._best_spread: dict[int, Spread] = {}
        topologies: dict[tuple[object, ...], Topology] = {}
        for node in cluster.nodes:
            if node.name in self.nodes:
                raise StateError(f"duplicate node name {node.name!r}")
            topo = topologies.get(node.gpus)
            if topo is None:
                topo = topologies[node.gpus] = Topology(node.gpus)
            ns = NodeState(node, topo, [None] * node.size, (1 << node.size) - 1, node.size)
            self.nodes[node.name] = ns
            self.total_free += node.size
            self.max_size = max(self.max_size, node.size)
            self._index(ns)

    # ---- indexes -------------------------------------------------------

    def _index(self, ns: NodeState) -> None:
        """Register an open node in the placement indexes (closed nodes stay out)."""
        self._slice_stale[ns.name] = None
        if not ns.open:
            return
        height = ns.height
        self._by_aff_height.setdefault(ns.affinity, {}).setdefault(height, {})[ns.name] = None
        free = ns.free
        self._by_free.setdefault(free, {})[ns.name] = None
        self._keys[ns.name] = (ns.affinity, height, free)

    def _unindex(self, ns: NodeState) -> None:
        keys = self._keys.pop(ns.name, None)
        if keys is None:
            return
        aff, height, free = keys
        by_height = self._by_aff_height[aff]
        del by_height[height][ns.name]
        if not by_height[height]:
            del by_height[height]
        del self._by_free[free][ns.name]
        if not self._by_free[free]:
            del self._by_free[free]

    def nodes_by_affinity(
        self, affinity: int, datasets: frozenset[str] = frozenset()
    ) -> Iterator[NodeState]:
        """Up nodes of one affinity, lowest height (load over size) first.

        Among nodes of equal height, those caching more of ``datasets`` come first.
        """
        by_height = self._by_aff_height.get(affinity)
        if not by_height:
            return
        for height in sorted(by_height):
            for name in self._holding_first(by_height[height], datasets):
                yield self.nodes[name]

    def _holding_first(self, names: Iterable[str], datasets: frozenset[str]) -> Iterable[str]:
        """``names`` with the nodes caching more of ``datasets`` first (else in their order)."""
        if not datasets or not self.cached:
            return names
        cached = self.cached
        return sorted(names, key=lambda n: -len(datasets & cached.get(n, frozenset())))

    def slice_targets(
        self, count: int, priority: int, max_members: int
    ) -> Iterator[tuple[NodeState, GroupKey]]:
        """Where a job of ``priority`` may time-slice into a ``count``-GPU set, node by node.

        Such a set lies on one node, holds no job of higher priority, is not
        a pack whose members all run and has fewer than ``max_members``
        jobs. Nodes come lowest height first, each with its set of fewest
        members (then lowest top priority).
        """
        self._refresh_slices()
        kinds = [(count, p) for p in range(int(priority) + 1)]
        buckets = [(c, p, m) for c, p in kinds for m in range(1, max_members)]
        indexes = [self._slice_index[b] for b in buckets if b in self._slice_index]
        if not indexes:
            return
        heights = sorted(set().union(*indexes)) if len(indexes) > 1 else sorted(indexes[0])
        seen: set[str] = set()
        for height in heights:
            for index in indexes:
                for name in index.get(height, ()):
                    if name not in seen:
                        seen.add(name)
                        best = self._slice_keys[name][1]
                        choice = min((best[k][0], k[1], best[k][1]) for k in kinds if k in best)
                        yield self.nodes[name], choice[2]

    def next_waiting(self, size: int) -> JobState | None:
        """The job first in line among those taking turns on a ``size``-GPU set.

        Taking turns means sharing a GPU set on which some job waits (running
        its turn or suspended). First in line is highest priority, then
        oldest. A job enters the line when it is first suspended; entries go
        stale as jobs move, finish or stop sharing and are dropped when they
        reach the top.
        """
        heap = self._waiting.get(size)
        while heap:
            job_id = heap[0][2]
            if self._is_waiting(job_id, size):
                return self.jobs[job_id]
            heapq.heappop(heap)
        return None

    def waiting_sizes(self) -> list[int]:
        """GPU counts for which jobs may be taking turns, smallest first."""
        return sorted(size for size, heap in self._waiting.items() if heap)

    def _is_waiting(self, job_id: str, size: int) -> bool:
        js = self.jobs.get(job_id)
        if js is None or len(js.gpus) != size:
            return False
        members = self.groups[js.gpus]
        jobs = self.jobs
        return len(members) > 1 and any(jobs[m].status is JobStatus.SUSPENDED for m in members)

    def _push_waiting(self, js: JobState) -> None:
        size = len(js.gpus)
        heap = self._waiting.setdefault(size, [])
        heapq.heappush(heap, (-int(js.spec.priority), js.seq, js.id))
        if len(heap) > 4 * len(self.jobs) + 64:
            # Time slicing suspends the same jobs over and over: compact now and then.
            heap[:] = sorted({e for e in heap if self._is_waiting(e[2], size)})

    def _refresh_slices(self) -> None:
        """Re-register the nodes whose groups changed since the last time-slice query."""
        for key in self._stale_groups:
            self._slice_group.pop(key, None)
            members = self.groups.get(key)
            if not members or key[0][0] != key[-1][0]:
                continue
            jobs = [self.jobs[m] for m in members]
            if len(jobs) > 1 and all(j.status is JobStatus.RUNNING for j in jobs):
                continue
            top = max(int(j.spec.priority) for j in jobs)
            self._slice_group[key] = ((len(key), top), len(jobs))
        self._stale_groups.clear()
        for name in self._slice_stale:
            old = self._slice_keys.pop(name, None)
            if old is not None:
                height, kinds = old
                for (gpus, top), (fewest, _) in kinds.items():
                    bucket = (gpus, top, fewest)
                    by_height = self._slice_index[bucket]
                    del by_height[height][name]
                    if not by_height[height]:
                        del by_height[height]
                    if not by_height:
                        del self._slice_index[bucket]
            ns = self.nodes[name]
            if not ns.open:
                continue
            found: dict[tuple[int, int], tuple[int, GroupKey]] = {}
            for key in ns.groups:
                entry = self._slice_group.get(key)
                if entry is None:
                    continue
                kind, count = entry
                rank = (count, key)
                if kind not in found or rank < found[kind]:
                    found[kind] = rank
            if found:
                height = ns.height
                for (gpus, top), (fewest, _) in found.items():
                    bucket = (gpus, top, fewest)
                    self._slice_index.setdefault(bucket, {}).setdefault(height, {})[name] = None
                self._slice_keys[name] = (height, found)
        self._slice_stale.clear()

    def nodes_with_free(
        self, at_least: int, most_free_first: bool = False, datasets: frozenset[str] = frozenset()
    ) -> Iterator[NodeState]:
        """Up nodes with at least ``at_least`` free GPUs, fewest free first unless asked.

        Among nodes with as many free GPUs, those caching more of ``datasets`` come first.
        """
        counts = sorted((f for f in self._by_free if f >= at_least), reverse=most_free_first)
        for f in counts:
            for name in self._holding_first(self._by_free[f], datasets):
                yield self.nodes[name]

    # ---- queries -------------------------------------------------------

    def job(self, job_id: str) -> JobState:
        """A live job, or :class:`StateError` naming it."""
        try:
            return self.jobs[job_id]
        except KeyError:
            raise StateError(f"unknown job {job_id!r}") from None

    def node(self, name: str) -> NodeState:
        """A node, or :class:`StateError` naming it."""
        try:
            return self.nodes[name]
        except KeyError:
            raise StateError(f"unknown node {name!r}") from None

    def members(self, key: GroupKey) -> list[str]:
        """Jobs resident on a GPU set, in round-robin order."""
        return self.groups.get(key, [])

    def member_jobs(self, key: GroupKey) -> list[JobState]:
        """The states of the jobs resident on a GPU set, in round-robin order."""
        return [self.jobs[m] for m in self.groups.get(key, ())]

    def mode_of(self, job_id: str) -> ShareMode:
        """Exclusive, packed (all members run), time-sliced, or opportunistic (a guest)."""
        js = self.job(job_id)
        if js.opportunistic:
            return ShareMode.OPPORTUNISTIC
        members = self.groups.get(js.gpus, [])
        if len(members) <= 1:
            return ShareMode.EXCLUSIVE
        if all(self.jobs[m].status is JobStatus.RUNNING for m in members):
            return ShareMode.PACKED
        return ShareMode.TIMESLICED

    def next_guest(self, size: int) -> JobState | None:
        """The waiting opportunistic job of ``size`` GPUs first in line, or None.

        First in line is highest priority, then oldest. Entries of jobs placed
        or gone are dropped as they reach the top.
        """
        heap = self._guest_heaps.get(size)
        while heap:
            js = self.jobs.get(heap[0][2])
            if js is not None and js.id in self.guest_queue:
                return js
            heapq.heappop(heap)
        return None

    def guest_sizes(self) -> list[int]:
        """GPU counts for which opportunistic jobs may be waiting."""
        return [size for size, heap in self._guest_heaps.items() if heap]

    def _queue_guest(self, js: JobState) -> None:
        self.guest_queue[js.id] = None
        heap = self._guest_heaps.setdefault(js.spec.gpus, [])
        heapq.heappush(heap, (-int(js.spec.priority), js.seq, js.id))
        if len(heap) > 2 * len(self.guest_queue) + 64:
            heap[:] = sorted({e for e in heap if e[2] in self.guest_queue})

    def groups_over(self, gpus: GroupKey) -> list[GroupKey]:
        """The production groups holding any of ``gpus``, each once."""
        found: dict[GroupKey, None] = {}
        for node, idx in gpus:
            ns = self.nodes.get(node)
            key = ns.group_of[idx] if ns is not None and idx < ns.size else None
            if key is not None:
                found[key] = None
        return list(found)

    def guests_over(self, gpus: GroupKey) -> list[str]:
        """The guests on any of ``gpus``, each once."""
        return list(dict.fromkeys(g for ref in gpus if (g := self.guest_on.get(ref)) is not None))

    def host_of(self, job_id: str) -> GroupKey | None:
        """The production group a guest shares its GPUs with (exactly its set), or None."""
        js = self.job(job_id)
        over = self.groups_over(js.gpus) if js.opportunistic else []
        return over[0] if len(over) == 1 and over[0] == js.gpus else None

    def spread(self, gpus: GroupKey) -> Spread:
        """Locality class of a GPU set (sorted, as every group key is)."""
        if len(gpus) <= 1:
            return Spread.SINGLE
        if gpus[0][0] != gpus[-1][0]:
            return Spread.CROSS_NODE
        return self.nodes[gpus[0][0]].topo.spread(tuple(i for _, i in gpus))

    def gpu_type(self, gpu: GpuRef) -> str:
        """The model of one GPU (``V100``, ``K80``, ...), as its node declares it."""
        return self.nodes[gpu[0]].node.gpus[gpu[1]].type

    def best_spread(self, count: int) -> Spread:
        """The tightest locality class any node offers a set of ``count`` GPUs."""
        if count <= 1:
            return Spread.SINGLE
        best = self._best_spread.get(count)
        if best is None:
            best = Spread.CROSS_NODE
            for topo in {id(ns.topo): ns.topo for ns in self.nodes.values()}.values():
                found = topo.best_set((1 << topo.size) - 1, count)
                if found is not None:
                    best = min(best, topo.spread(found))
            self._best_spread[count] = best
        return best

    def cluster_height(self) -> float:
        """Gandiva cluster height: the highest node height."""
        return max((ns.height for ns in self.nodes.values() if ns.up), default=0.0)

    # ---- events --------------------------------------------------------

    def submit(self, spec: JobSpec, now: float) -> JobState:
        """Add a new job to the pending queue (a guest to the guests' queue)."""
        if spec.id in self.jobs:
            raise StateError(f"job {spec.id!r} already exists")
        self._seq += 1
        js = JobState(spec, seq=self._seq, since=now)
        self.jobs[spec.id] = js
        if js.opportunistic:
            self._queue_guest(js)
            return js
        self.changes += 1
        self.backlog[spec.gpus] = self.backlog.get(spec.gpus, 0) + spec.gpus
        self._enqueue(js)
        return js

    def finish(self, job_id: str, now: float) -> JobState:
        """Remove a job that completed, failed or was cancelled."""
        js = self.job(job_id)
        if js.opportunistic:
            self.guest_queue.pop(job_id, None)
            if js.gpus:
                self._guest_leave(js, now)
            js.status = JobStatus.DONE
            js.since = now
            del self.jobs[job_id]
            return js
        self.changes += 1
        if js.status is JobStatus.PENDING:
            self._dequeue(js)
        elif js.gpus:
            self._leave(js, now)
        js.status = JobStatus.DONE
        js.since = now
        del self.jobs[job_id]
        size = js.spec.gpus
        self.backlog[size] -= size
        if not self.backlog[size]:
            del self.backlog[size]
        return js

    def observe(self, job_id: str, sample: Observed) -> None:
        """Record a profile sample; one taken while its GPUs ran nothing else is its solo rate."""
        self.samples += 1
        js = self.job(job_id)
        js.observed = sample
        if js.status is JobStatus.RUNNING and not any(
            m != job_id and self.jobs[m].status is JobStatus.RUNNING
            for m in self.groups.get(js.gpus, ())
        ):
            js.solo_rate = sample.progress_rate

    def node_down(self, name: str, now: float) -> list[str]:
        """Take a node out of service; its jobs go back to the queue. Returns their ids."""
        self.node_events += 1
        ns = self.node(name)
        requeued: list[str] = []
        for key in list(ns.groups):
            for job_id in list(self.groups[key]):
                js = self.jobs[job_id]
                self._leave(js, now)
                js.status = JobStatus.PENDING
                js.since = now
                self._enqueue(js)
                requeued.append(job_id)
        for ref, guest in list(self.guest_on.items()):
            if ref[0] == name and guest in self.guests:
                self._guest_requeue(self.jobs[guest], now)
                requeued.append(guest)
        self._reindex(ns, lambda: setattr(ns, "up", False))
        return requeued

    def node_up(self, name: str) -> None:
        """Return a node to service."""
        ns = self.node(name)
        self._reindex(ns, lambda: setattr(ns, "up", True))

    def drain(self, name: str, by: str) -> None:
        """Close a node to new work on behalf of ``by``; jobs already there stay.

        A node stays drained until every holder (an operator, a reservation)
        has undrained it. Its free GPUs no longer count as free for placement.
        """
        ns = self.node(name)
        self._reindex(ns, lambda: ns.drained_by.setdefault(by))

    def undrain(self, name: str, by: str) -> None:
        """Lift ``by``'s drain of a node."""
        ns = self.node(name)
        self._reindex(ns, lambda: ns.drained_by.pop(by, None))

    def _reindex(self, ns: NodeState, change: Callable[[], object]) -> None:
        """Apply a change to a node's availability, keeping free counts and indexes right."""
        self.changes += 1
        was_open = ns.open
        change()
        if ns.open == was_open:
            return
        self._slice_stale[ns.name] = None
        if was_open:
            self._unindex(ns)
            self.total_free -= ns.free
        else:
            self.total_free += ns.free
            self._index(ns)

    # ---- decisions -----------------------------------------------------

    def apply(self, d: Decision, now: float) -> None:
        """Commit one decision to the model (bookkeeping only, no side effects)."""
        js = self.job(d.job_id)
        js.reason = d.reason
        if js.opportunistic:
            self._apply_guest(js, d, now)
            return
        self.changes += 1
        match d:
            case Place(gpus=gpus):
                if js.status is not JobStatus.PENDING:
                    raise StateError(f"job {js.id} is not pending")
                self._dequeue(js)
                self._join(js, gpus, now)
            case Queue():
                pass
            case Suspend():
                self._expect(js, JobStatus.RUNNING)
                self._set(js, JobStatus.SUSPENDED, now)
            case Resume():
                self._expect(js, JobStatus.SUSPENDED)
                self._set(js, JobStatus.RUNNING, now)
                members = self.groups[js.gpus]
                if len(members) > 1 and all(
                    self.jobs[m].status is JobStatus.RUNNING for m in members
                ):
                    for m in members:  # a turn taken packed that left nobody waiting: a pack
                        self.jobs[m].packed_at = now
            case Pack(gpus=gpus):
                self._leave(js, now)
                self._join(js, gpus, now)
                js.packed_at = now
                for other in self.groups[js.gpus]:
                    self.jobs[other].packed_at = now
            case Unpack():
                self._expect(js, JobStatus.RUNNING)
                self._set(js, JobStatus.SUSPENDED, now)
                for other in self.groups[js.gpus]:
                    self.jobs[other].packed_at = None
            case Migrate(dst=gpus):
                self._leave(js, now)
                self._join(js, gpus, now)
                js.moves += 1
            case Grow(gpus=gpus) | Shrink(gpus=gpus):
                self._leave(js, now)
                self._join(js, gpus, now)
                js.resized_at = now
            case Requeue():
                if js.status is JobStatus.PENDING:
                    raise StateError(f"job {js.id} is already pending")
                self._leave(js, now)
                js.status = JobStatus.PENDING
                js.since = now
                self._enqueue(js)
        if js.gpus:
            self._touch(js.gpus)

    def _apply_guest(self, js: JobState, d: Decision, now: float) -> None:
        """Commit a decision on a guest: placed, queued, suspended in place, resumed or requeued."""
        match d:
            case Place(gpus=gpus):
                if js.status is not JobStatus.PENDING:
                    raise StateError(f"job {js.id} is not pending")
                key = tuple(sorted(gpus))
                for ref in key:
                    ns = self.nodes.get(ref[0])
                    if ns is None or not ns.up or ref[1] >= ns.size:
                        raise StateError(f"GPU {ref[0]}:{ref[1]} is not available")
                    if ref in self.guest_on:
                        raise StateError(f"GPU {ref[0]}:{ref[1]} already has a guest")
                del self.guest_queue[js.id]
                for ref in key:
                    self.guest_on[ref] = js.id
                over = self.groups_over(key)
                hosts = self.groups[over[0]] if over == [key] else []
                js.beside = hosts[0] if len(hosts) == 1 else None
                self.guests[js.id] = None
                js.gpus = key
                self._set(js, JobStatus.RUNNING, now)
            case Queue():
                pass
            case Suspend():
                self._expect(js, JobStatus.RUNNING)
                js.bank(now)
                js.status, js.since = JobStatus.SUSPENDED, now
            case Resume():
                self._expect(js, JobStatus.SUSPENDED)
                self._set(js, JobStatus.RUNNING, now)
            case Requeue():
                if js.status is JobStatus.PENDING:
                    raise StateError(f"job {js.id} is already pending")
                self._guest_requeue(js, now)
            case _:
                raise StateError(
                    f"job {js.id} is opportunistic: it is placed, suspended, resumed or"
                    f" requeued, never moved ({type(d).__name__})"
                )

    def _guest_requeue(self, js: JobState, now: float) -> None:
        self._guest_leave(js, now)
        js.status = JobStatus.PENDING
        js.since = now
        self._queue_guest(js)

    def _guest_leave(self, js: JobState, now: float) -> None:
        js.bank(now)
        for ref in js.gpus:
            del self.guest_on[ref]
        del self.guests[js.id]
        js.gpus = ()
        js.beside = None

    def _touch(self, key: GroupKey) -> None:
        """Note that a group changed, for the time-slice index to catch up lazily."""
        self._touches += 1
        self.touched[key] = self._touches
        self._stale_groups[key] = None
        self._slice_stale[key[0][0]] = None
        if key[0][0] != key[-1][0]:
            for node, _ in key:
                self._slice_stale[node] = None

    def commit(self, decisions: list[Decision], now: float) -> list[Decision]:
        """Apply decisions in order and hand them back, for policies building a batch."""
        for d in decisions:
            self.apply(d, now)
        return decisions

    # ---- internals -----------------------------------------------------

    @staticmethod
    def _expect(js: JobState, status: JobStatus) -> None:
        if js.status is not status:
            raise StateError(f"job {js.id} is {js.status.value}, expected {status.value}")

    def _set(self, js: JobState, status: JobStatus, now: float) -> None:
        js.bank(now)
        js.status = status
        js.since = now
        if status is JobStatus.SUSPENDED:
            self._push_waiting(js)
        elif status is JobStatus.RUNNING:
            js.last_resumed = now
            if js.first_run is None:
                js.first_run = now

    def _enqueue(self, js: JobState) -> None:
        """Queue ``js`` in its bucket in arrival order: a requeued job goes before later ones."""
        key = (int(js.spec.priority), js.spec.gpus)
        bucket = self.pending.setdefault(key, {})
        self._touches += 1
        stamp = self.queued[key] = self._touches
        last = next(reversed(bucket), None)
        if last is not None and self.jobs[last].seq > js.seq:
            order = list(bucket.items())
            at = bisect_right(order, js.seq, key=lambda entry: self.jobs[entry[0]].seq)
            order.insert(at, (js.id, stamp))
            bucket.clear()
            bucket.update(order)
        else:
            bucket[js.id] = stamp

    def _dequeue(self, js: JobState) -> None:
        key = (int(js.spec.priority), js.spec.gpus)
        bucket = self.pending[key]
        del bucket[js.id]
        self._touches += 1
        self.queued[key] = self._touches
        if not bucket:
            del self.pending[key], self.queued[key]

    def _join(self, js: JobState, gpus: GroupKey, now: float) -> None:
        """Make ``js`` resident and running on ``gpus`` (a free set or an existing group)."""
        key = tuple(sorted(gpus))
        self._touch(key)
        members = self.groups.get(key)
        if members is None:
            self._claim(key)
            members = self.groups[key] = []
        elif js.id in members:
            raise StateError(f"job {js.id} already on {key}")
        members.append(js.id)
        if len(members) == 2:
            self.shared[key] = None
        if key[0][0] != key[-1][0]:
            self.scattered[key] = None
        if js.spec.elastic:
            self.elastic[js.id] = None
        single = key[0][0] == key[-1][0]
        for node in (key[0][0],) if single else dict.fromkeys(n for n, _ in key):
            ns = self.nodes[node]
            on_node = len(key) if single else sum(1 for n, _ in key if n == node)
            self._unindex(ns)
            ns.load += on_node
            if ns.affinity == 0:
                ns.affinity = min(js.spec.gpus, ns.size)
            self._index(ns)
        js.gpus = key
        self._set(js, JobStatus.RUNNING, now)

    def _claim(self, key: GroupKey) -> None:
        """Mark a free GPU set as held by a new group."""
        for node, idx in key:
            ns = self.nodes.get(node)
            if ns is None or not ns.up:
                raise StateError(f"node {node!r} is not available")
            if idx >= ns.size or not ns.free_mask >> idx & 1:
                raise StateError(f"GPU {node}:{idx} is not free")
        for node in dict.fromkeys(n for n, _ in key):
            ns = self.nodes[node]
            self._unindex(ns)
            for n, idx in key:
                if n == node:
                    ns.free_mask &= ~(1 << idx)
                    ns.group_of[idx] = key
                    if ns.open:
                        self.total_free -= 1
            ns.groups[key] = None
            self._index(ns)

    def _leave(self, js: JobState, now: float) -> None:
        """Take ``js`` off its GPUs, banking its service; free them when it was the last member."""
        js.bank(now)
        key = js.gpus
        self._touch(key)
        members = self.groups[key]
        members.remove(js.id)
        if len(members) == 1:
            self.shared.pop(key, None)
        self.elastic.pop(js.id, None)
        single = key[0][0] == key[-1][0]
        for node in (key[0][0],) if single else dict.fromkeys(n for n, _ in key):
            ns = self.nodes[node]
            on_node = len(key) if single else sum(1 for n, _ in key if n == node)
            self._unindex(ns)
            ns.load -= on_node
            if not members:
                for n, idx in key:
                    if n == node:
                        ns.free_mask |= 1 << idx
                        ns.group_of[idx] = None
                        if ns.open:
                            self.total_free += 1
                del ns.groups[key]
            if ns.load == 0:
                ns.affinity = 0
            self._index(ns)
        if members:
            self.dirty[key] = None
        else:
            del self.groups[key]
            del self.touched[key]
            self.dirty.pop(key, None)
            self.scattered.pop(key, None)
        js.gpus = ()
