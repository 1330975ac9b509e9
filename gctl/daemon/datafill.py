"""The datasets a job names, on the node it starts on, before its container starts.

For each dataset the job names (``--dataset NAME[:/mount]``) the node's
cache gets an intact copy (:func:`gctl.services.datacache.ensure`: checked,
else filled from a node this daemon filled before, else from the source),
and the job gets it mounted read-only. Two jobs starting on one node with the
same dataset copy it once: the second waits for the first's fill. Which
nodes hold which copies (the affinity placement uses, and the nearest
holder a fill copies from) is read from the nodes' caches when the daemon
starts, and kept up to date by its fills and evictions. A copy
that was filled is an event (``dataset.fill``, with bytes and seconds); a
dataset that cannot be had stops the start (a permanent failure when the
copy never matches its digest: the job is held with the reason).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from gctl.hosts.mounts import Mount
from gctl.hosts.ssh import HostError, Pool
from gctl.services import datacache, events, hostops
from gctl.services.db import Store
from gctl.services.specs import dataset_entry
from gctl.store.engine import transaction
from gctl.store.models import DatasetRow, JobRow, NodeRow


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a container needs for its datasets: read-only mounts, and the copies' keys."""

    mounts: tuple[Mount, ...] = ()
    keys: tuple[str, ...] = ()


class Fills:
    """The daemon's fills of node caches: one at a time per copy, and who holds which copy."""

    def __init__(self, store: Store, pool: Pool) -> None:
        self.store = store
        self.pool = pool
        self._locks: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()
        self.holders: dict[str, set[str]] = defaultdict(set)
        """Nodes this daemon filled or found with each copy, by key."""
        self.learned: set[str] = set()
        """Nodes whose caches :meth:`learn` has read."""

    def learn(self, nodes: Iterable[NodeRow]) -> None:
        """Read which copies the caches of ``nodes`` hold: a new daemon knows none of them.

        A node that does not answer stays unlearned and is asked again later
        (:attr:`learned`); a copy filled or found meanwhile is kept either way.
        """
        held, answered = datacache.holdings(self.pool, nodes)
        with self._guard:
            for copy, names in held.items():
                self.holders[copy] |= names
            self.learned |= answered

    def cached(self) -> dict[str, frozenset[str]]:
        """The dataset names each node holds a copy of, as far as this daemon knows."""
        by_node: dict[str, set[str]] = defaultdict(set)
        with self._guard:
            for copy, holders in self.holders.items():
                for node in holders:
                    by_node[node].add(copy.partition("@")[0])
        return {node: frozenset(names) for node, names in by_node.items()}

    def _lock(self, node: str, key: str) -> threading.Lock:
        with self._guard:
            return self._locks[node, key]

    def _resolve(self, names: Sequence[str]) -> tuple[list[DatasetRow], dict[str, NodeRow]]:
        """The datasets by name, and the nodes that are sources or holders, by name."""
        with transaction(self.store.engine, write=False) as s:
            rows = list(s.scalars(select(DatasetRow).where(DatasetRow.name.in_(sorted(names)))))
            wanted = {r.source_node for r in rows if r.source_node is not None}
            with self._guard:
                for r in rows:
                    wanted |= self.holders[datacache.key(r.name, r.digest)]
            nodes = {n.name: n for n in s.scalars(select(NodeRow).where(NodeRow.name.in_(wanted)))}
            for item in [*rows, *nodes.values()]:
                s.expunge(item)
        return rows, nodes

    def prepare(self, node: NodeRow, job_id: int, entries: Sequence[str]) -> Prepared:
        """Make sure ``node`` has each dataset of the job; its mounts (HostError when not)."""
        if not entries:
            return Prepared()
        wanted = [dataset_entry(e) for e in entries]
        rows, nodes = self._resolve([name for name, _ in wanted])
        by_name = {r.name: r for r in rows}
        keys = [datacache.key(r.name, r.digest) for r in rows]
        mounts: list[Mount] = []
        used: list[str] = []
        for name, target in wanted:
            row = by_name.get(name)
            if row is None:
                raise HostError(node.name, f"dataset {name} was removed", permanent=True)
            source = None if row.source_node is None else nodes.get(row.source_node)
            if source is None and row.source_node is not None:
                why = f"dataset {name}: its source node {row.source_node} was removed"
                raise HostError(node.name, why, permanent=True)
            dataset = datacache.Dataset(row.name, row.digest, row.bytes, source, row.source_path)
            with self._guard:
                holders = [nodes[h] for h in sorted(self.holders[dataset.key]) if h in nodes]

            def copying(source: str, name: str = name, size: int = row.bytes) -> None:
                what = f"copying dataset {name} ({size} bytes) to {node.name} from {source}"
                data = {"dataset": name, "bytes": size, "source": source, "state": "copying"}
                self._event(job_id, node.name, "dataset.copy", f"job {job_id}: {what}", data)

            shown = _Progress(
                self.store, job_id, f"copying dataset {name} to {node.name}", row.bytes
            )
            with self._lock(node.name, dataset.key):
                try:
                    filled = datacache.ensure(
                        self.pool, node, dataset, holders, keys, copying, shown
                    )
                finally:
                    shown.done()
            with self._guard:
                self.holders[dataset.key].add(node.name)
                for gone in filled.evicted:
                    self.holders[gone].discard(node.name)
                if holders and filled.source not in (None, holders[0].name):
                    self.holders[dataset.key].discard(holders[0].name)  # it could not send
            if not filled.cached:
                self._record(job_id, name, filled)
            src = f"{hostops.cache_dir(node)}/{dataset.key}"
            mounts.append(Mount(src, target, True))
            used.append(dataset.key)
        return Prepared(tuple(mounts), tuple(used))

    def _record(self, job_id: int, name: str, filled: datacache.Filled) -> None:
        data = {
            "dataset": name,
            "bytes": filled.bytes,
            "seconds": round(filled.seconds, 3),
            "source": filled.source,
            "evicted": list(filled.evicted),
            "state": "copied",
        }
        message = f"job {job_id}: {filled.describe(name)}"
        self._event(job_id, filled.node, "dataset.fill", message, data)

    def _event(self, job_id: int, node: str, kind: str, message: str, data: dict[str, Any]) -> None:
        with transaction(self.store.engine, write=True) as s:
            events.record(s, kind, message, job_id=job_id, node=node, data=data)


PROGRESS_EVERY = 1.0
"""Seconds between two updates of a fill's progress in its job's reason."""


class _Progress:
    """A fill's bytes so far, shown in its job's reason (``gctl queue``, ``show job``, ``watch``).

    The reason is changed only while it is the one this showed last (or the
    one it found), so a decision that changed it meanwhile is never
    overwritten; :meth:`done` puts the reason found back.
    """

    def __init__(self, store: Store, job_id: int, what: str, total: int) -> None:
        self.store = store
        self.job_id = job_id
        self.what = what
        self.total = total
        self.found: str | None = None
        self.shown: str | None = None
        self.at = time.monotonic()

    def __call__(self, moved: int) -> None:
        """Show ``moved`` bytes of the copy, at most every :data:`PROGRESS_EVERY` seconds."""
        if time.monotonic() - self.at < PROGRESS_EVERY:
            return
        self.at = time.monotonic()
        total = self.total
        of = f" of {total / 1e6:.0f} MB ({100 * moved / total:.0f}%)" if total else " MB"
        self._show(f"{self.what}: {moved / 1e6:.0f}{of}")

    def done(self) -> None:
        """Put the job's reason back as it was before the copy showed on it."""
        if self.shown is not None:
            self._show(None)

    def _show(self, text: str | None) -> None:
        with transaction(self.store.engine, write=True) as s:
            row = s.get(JobRow, self.job_id)
            if row is None:
                return
            if self.shown is None:
                self.found = row.reason
            elif row.reason != self.shown:
                return  # a decision gave it a reason of its own since
            row.reason = self.found if text is None else text
            self.shown = text
