"""Datasets in the simulator: which dataset each job reads, how big, and the time to copy it.

Traces say nothing of datasets, so a run may give every job one dataset of
a seeded *catalogue* (``gctl sim run --datasets N``): N datasets whose sizes
are spread log-uniformly from 1 GB to 500 GB (CIFAR-10 is 0.2 GB, COCO 25 GB,
ImageNet-1k 150 GB, a large speech or video corpus 1 TB), drawn with Zipf
popularity (exponent 1.1): a few datasets are read by many jobs, as on a
shared cluster. The same seed gives the same catalogue and assignment.

A node caches the datasets it copied up to its cache size
(``--cache-size``, GB; by the agent's rule: the least recently used
datasets no job on the node reads are evicted until 1.2 times the need is
free; a dataset bigger than the cache is read without being kept). A job
placed on nodes lacking its dataset waits for the copy, size / bandwidth
(``--data-bandwidth``, GB/s per node, the nodes copying in parallel): its
first progress comes that much later, and the wait is charged as work, like
a resume's overhead. With affinity (the default) the scheduler core sees
which nodes hold which datasets (:attr:`gctl.core.state.ClusterState.cached`)
and prefers, among nodes equally good, those holding the job's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gctl.core.model import GpuRef
from gctl.sim.workload import TraceJob

SMALLEST_GB = 1.0
LARGEST_GB = 500.0
ZIPF = 1.1
ROOM_FACTOR = 1.2
"""Eviction frees until this many times the need is free: the cache agent's rule (which, sent to
hosts as a script of its own, cannot share the constant; a test holds them equal)."""


@dataclass(frozen=True, slots=True)
class DataModel:
    """The datasets' sizes (GB, by name), the copy bandwidth, and whether placement sees caches."""

    sizes: dict[str, float]
    bandwidth: float = 1.0
    """GB/s one node copies at."""
    affinity: bool = True
    capacity: float = 2000.0
    """GB a node's cache holds."""


@dataclass(slots=True)
class Caches:
    """What each node has copied so far, and each job's first wait for a copy."""

    model: DataModel
    held: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each node's cached datasets, with when each was last used (the LRU clock)."""
    first_wait: dict[str, float] = field(default_factory=dict)

    def copy(
        self,
        job_id: str,
        datasets: Sequence[str],
        gpus: Sequence[GpuRef],
        now: float,
        in_use: Callable[[str], set[str]],
    ) -> float:
        """Seconds the job waits for copies onto the nodes of ``gpus``; they hold them after.

        ``in_use(node)``: the datasets jobs on the node read (never evicted).
        """
        wait = 0.0
        for node in dict.fromkeys(n for n, _ in gpus):
            have = self.held.setdefault(node, {})
            missing = [d for d in datasets if d not in have]
            gb = sum(self.model.sizes.get(d, 0.0) for d in missing)
            wait = max(wait, gb / self.model.bandwidth)
            for d in datasets:
                if d in have:
                    have[d] = now
            if missing and self._room(have, gb, in_use(node)):
                have.update(dict.fromkeys(missing, now))
        self.first_wait.setdefault(job_id, wait)
        return wait

    def _room(self, have: dict[str, float], gb: float, keep: set[str]) -> bool:
        """Evict least recently used datasets not in ``keep`` to fit ``gb``; whether it fits."""
        sizes, capacity = self.model.sizes, self.model.capacity
        free = capacity - sum(sizes.get(d, 0.0) for d in have)
        if gb <= free:
            return True
        for d, _ in sorted(have.items(), key=lambda kv: kv[1]):
            if free >= ROOM_FACTOR * gb:
                break
            if d not in keep:
                del have[d]
                free += sizes.get(d, 0.0)
        return gb <= free

    def names(self, node: str) -> frozenset[str]:
        """The datasets one node holds now."""
        return frozenset(self.held.get(node, ()))


def catalogue(count: int, seed: int) -> dict[str, float]:
    """``count`` datasets' sizes in GB, log-uniform between 1 GB and 500 GB (seeded)."""
    rng = random.Random(f"{seed}:datasets")
    low, high = SMALLEST_GB, LARGEST_GB
    return {f"ds{i:02d}": round(low * (high / low) ** rng.random(), 1) for i in range(count)}


def assign(jobs: Sequence[TraceJob], sizes: dict[str, float], seed: int) -> list[TraceJob]:
    """Give each job one dataset of the catalogue, Zipf-popular (seeded)."""
    names = list(sizes)
    if not names:
        return list(jobs)
    rng = random.Random(f"{seed}:assign")
    weights = [1.0 / (rank + 1) ** ZIPF for rank in range(len(names))]
    out = []
    for job in jobs:
        [name] = rng.choices(names, weights)
        out.append(replace(job, spec=replace(job.spec, datasets=(name,))))
    return out
