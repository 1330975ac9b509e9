"""Every node's GPU rows, read again only for the nodes whose GPUs changed.

The daemon reads the whole cluster each tick, and at 1,000 nodes x 8 GPUs
the GPU rows were most of that read (a profile under load at 1,000 hosts:
about half of the tick thread's time). GPU rows change only when a node is
added or a probe finds new hardware, and each such change counts one more
in the node's ``inventory`` (:class:`gctl.store.models.NodeRow`) in the same
transaction. A :class:`GpuRows` keeps what it built from each node's rows
with the node's id, ``created_at`` and ``inventory``, and reads again only
the nodes where one of them changed (a node removed and added again may get
the same id, never the same ``created_at`` and id both).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection, select

from gctl.store.models import GpuRow

NodeKey = tuple[float, int]
"""What a node's GPU rows were read under: its ``created_at`` and ``inventory``."""

T = TypeVar("T")

IN_CHUNK = 500
"""Node ids per ``IN`` list when a few nodes are read again."""


@dataclass(frozen=True, slots=True)
class GpuValues:
    """One GPU row's values, as the readers of the whole cluster need them."""

    id: int
    index: int
    model: str
    memory_mb: int
    socket: int
    pcie_switch: int
    nvlink_peers: Any


_COLUMNS = (
    GpuRow.node_id,
    GpuRow.id,
    GpuRow.index,
    GpuRow.model,
    GpuRow.memory_mb,
    GpuRow.socket,
    GpuRow.pcie_switch,
    GpuRow.nvlink_peers,
)


class GpuRows(Generic[T]):
    """What ``build`` makes of each node's GPU rows (index order), kept from read to read.

    One reader thread at a time.
    """

    def __init__(self, build: Callable[[tuple[GpuValues, ...]], T]) -> None:
        """Nothing read yet."""
        self._build = build
        self._kept: dict[int, tuple[NodeKey, T]] = {}

    def read(self, conn: Connection, nodes: Mapping[int, NodeKey]) -> dict[int, T]:
        """What each of ``nodes`` (node id -> its key) has, its rows read where not kept as is.

        Read within the transaction that read ``nodes``: a key read there
        vouches for the GPU rows kept under it.
        """
        kept = self._kept
        stale = [n for n, key in nodes.items() if n not in kept or kept[n][0] != key]
        found: dict[int, list[GpuValues]] = {n: [] for n in stale}
        query = select(*_COLUMNS).order_by(GpuRow.node_id, GpuRow.index)
        if len(stale) > len(nodes) // 2:
            batches = [query]  # most of them: one read of every row
        else:
            batches = [
                query.where(GpuRow.node_id.in_(stale[i : i + IN_CHUNK]))
                for i in range(0, len(stale), IN_CHUNK)
            ]
        for batch in batches if stale else []:
            for node_id, *values in conn.execute(batch):
                listed = found.get(node_id)
                if listed is not None:
                    listed.append(GpuValues(*values))
        fresh = {n: (nodes[n], self._build(tuple(rows))) for n, rows in found.items()}
        self._kept = {n: fresh[n] if n in fresh else kept[n] for n in nodes}
        return {n: built for n, (_, built) in self._kept.items()}
