"""The daemon's reads of every node's GPUs: read again only where a node's GPUs changed."""

from __future__ import annotations

from typing import Any

from storekit import node

from gctl.services import db, hostops, nodes, probe
from gctl.store import snapshot
from gctl.store.engine import transaction
from gctl.store.models import NodeRow, now


def _inventory(count: int, memory_mb: int) -> dict[str, Any]:
    """What a host's GPU inventory script answers for ``count`` V100s."""
    gpus = [
        {"index": i, "model": "Tesla V100-SXM2-32GB", "memory_mb": memory_mb} for i in range(count)
    ]
    return {"gpus": gpus}


def _probed(store: db.Store, name: str, inventory: dict[str, Any]) -> int:
    """Record a probe of ``name`` that found ``inventory``; the node's inventory count then."""
    with transaction(store.engine, write=True) as s:
        row = nodes.named_rows(s, [name])[0]
        host = hostops.host(row, "test", ())
        probe._record(s, host, probe._Answer("27.5.1", inventory, 0.1))
    with transaction(store.engine, write=False) as s:
        return nodes.named_rows(s, [name])[0].inventory


def test_a_probe_that_finds_other_gpus_is_seen_by_the_daemons_reads_which_reread_that_node_only(
    store: db.Store,
) -> None:
    node(store, "a")
    node(store, "b")
    reader, kept = hostops.NodeReader(), snapshot.core_gpus()

    def read() -> tuple[hostops.NodeGpus, snapshot.Snapshot]:
        with transaction(store.engine, write=False) as s:
            _, gpus = reader.read(s)
        return gpus, snapshot.read(store.engine, now=now(), gpus=kept)

    before, snap = read()
    assert [g.memory_mb for g in before["a"]] == [16384] * 4
    assert _probed(store, "a", _inventory(8, 32768)) == 1
    assert _probed(store, "a", _inventory(8, 32768)) == 1  # found as recorded: no change
    after, snap = read()
    assert [(g.index, g.memory_mb) for g in after["a"]] == [(i, 32768) for i in range(8)]
    assert after["b"] is before["b"]  # b's GPU rows were not read again
    assert [g.memory_mb for g in snap.state.nodes["a"].node.gpus] == [32768] * 8
    assert len(snap.state.nodes["b"].node.gpus) == 4
    with transaction(store.engine, write=False) as s:
        assert s.get(NodeRow, snap.node_ids["b"]).inventory == 0  # type: ignore[union-attr]


def test_a_node_removed_and_added_again_under_its_name_gets_its_new_gpus(store: db.Store) -> None:
    node(store, "a")
    node(store, "z", "2xV100-16GB")
    reader, kept = hostops.NodeReader(), snapshot.core_gpus()
    with transaction(store.engine, write=False) as s:
        reader.read(s)
    snapshot.read(store.engine, now=now(), gpus=kept)
    nodes.remove_node(store, "z")
    node(store, "z", "4xK80-12GB")  # may get z's old id back: the last id is free again
    with transaction(store.engine, write=False) as s:
        _, gpus = reader.read(s)
    snap = snapshot.read(store.engine, now=now(), gpus=kept)
    assert [g.model for g in gpus["z"]] == ["K80"] * 4
    assert [g.type for g in snap.state.nodes["z"].node.gpus] == ["K80"] * 4
    assert sorted(snap.gpu_ids) == sorted(
        (name, i) for name, count in (("a", 4), ("z", 4)) for i in range(count)
    )
