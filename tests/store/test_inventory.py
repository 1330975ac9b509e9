"""``gctl node add -f``: an inventory of many nodes, recorded all at once or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from clikit import run
from storekit import FP, node

from gctl.services import db, hostops, nodes
from gctl.services.errors import ServiceError
from gctl.services.inventory import InventoryError, read_inventory
from gctl.store.engine import transaction

OTHER_FP = "SHA256:" + "B" * 43


def _toml(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "inventory.toml"
    path.write_text(
        "".join(
            f'[[nodes]]\nname = "gpu{i:02d}"\nhost = "10.0.0.{i}"\n'
            f'host_key_fingerprint = "{FP}"\nemulate_gpus = "8xA100-80GB"\n'
            + ('port = 2222\nuser = "ops"\n' if i == 1 else "")
            for i in range(1, count + 1)
        )
    )
    return path


def test_fifty_nodes_from_a_toml_inventory_are_recorded_in_one_go(
    store: db.Store, tmp_path: Path
) -> None:
    added = nodes.add_nodes(store, read_inventory(_toml(tmp_path, 50)))
    assert [v.name for v in added] == [f"gpu{i:02d}" for i in range(1, 51)]
    listed = {v.name: v for v in nodes.list_nodes(store)}
    assert len(listed) == 50 and listed["gpu50"].gpus_total == 8
    first = nodes.show_node(store, "gpu01")
    assert (first.host, first.port, first.ssh_user) == ("10.0.0.1", 2222, "ops")
    assert first.host_key_fingerprint == FP


def test_a_csv_inventory_with_empty_cells(store: db.Store, tmp_path: Path) -> None:
    path = tmp_path / "inventory.csv"
    path.write_text(
        "name,host,port,host_key_fingerprint,emulate_gpus,cache_size\n"
        f"a1,10.1.0.1,,{FP},2xV100-16GB,100G\n"
        f"a2,10.1.0.2,2200,{OTHER_FP},,\n"
    )
    nodes.add_nodes(store, read_inventory(path))
    a1, a2 = nodes.show_node(store, "a1"), nodes.show_node(store, "a2")
    assert (a1.port, a1.gpus_total, a2.port, a2.host_key_fingerprint) == (22, 2, 2200, OTHER_FP)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[nodes]]\nname = "a"\nhost = "h"\n', "node 1: missing 'host_key_fingerprint'"),
        (f'[[nodes]]\nname = "a"\nhots = "h"\nhost_key_fingerprint = "{FP}"\n', "(did you mean"),
        (f'[[nodes]]\nname = "a b"\nhost = "h"\nhost_key_fingerprint = "{FP}"\n', "node 1: "),
        (f'[[nodes]]\nname = "a"\nhost = "h"\nport = "x"\nhost_key_fingerprint = "{FP}"\n', "port"),
        ("[[nodes]\n", "not valid TOML"),
        ('[cluster]\nname = "x"\n', "expected [[nodes]] tables only"),
    ],
)
def test_a_bad_inventory_is_refused_naming_the_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InventoryError, match=r"bad\.toml") as caught:
        read_inventory(path)
    assert message in str(caught.value)


def test_one_name_taken_or_given_twice_records_none(store: db.Store, tmp_path: Path) -> None:
    node(store, "gpu07")
    with pytest.raises(ServiceError, match="node 'gpu07' already exists"):
        nodes.add_nodes(store, read_inventory(_toml(tmp_path, 10)))
    assert [v.name for v in nodes.list_nodes(store)] == ["gpu07"]
    twice = read_inventory(_toml(tmp_path, 2)) * 2
    with pytest.raises(ServiceError, match="node 'gpu01' is given more than once"):
        nodes.add_nodes(store, twice)
    assert [v.name for v in nodes.list_nodes(store)] == ["gpu07"]


def test_node_add_file_on_the_command_line(
    store: db.Store, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCTL_DB", db_url)
    code, out, err = run("node", "add", "-f", str(_toml(tmp_path, 3)))
    assert (code, out, err) == (0, "3 nodes added (24 GPUs)\n", "")
    code, out, err = run("node", "add", "-f", str(_toml(tmp_path, 4)))
    assert (code, out) == (1, "")
    assert err == "gctl: error: node 'gpu01' already exists\n"
    assert len(nodes.list_nodes(store)) == 3
    code, _, err = run("node", "add", "x", "-f", str(_toml(tmp_path, 4)))
    assert code == 2 and err.startswith("gctl: error: --file takes every node from the file")
    code, _, err = run("node", "add", "x")
    assert code == 2 and "give NODE and --host" in err


def test_the_daemons_read_of_the_nodes_gives_each_its_gpus_in_index_order(
    store: db.Store, tmp_path: Path
) -> None:
    nodes.add_nodes(store, read_inventory(_toml(tmp_path, 3)))
    nodes.remove_node(store, "gpu02")
    with transaction(store.engine, write=False) as s:
        rows, gpus = hostops.read_nodes(s)
    assert sorted(rows) == sorted(gpus) == ["gpu01", "gpu03"]
    assert [g.index for g in gpus["gpu03"]] == list(range(8))
    assert {(g.model, g.memory_mb) for g in gpus["gpu01"]} == {("A100", 81920)}
    with transaction(store.engine, write=False) as s:
        [row] = nodes.named_rows(s, ["gpu03"])
        assert hostops.gpus_of(row) == gpus["gpu03"]  # the same as from loaded GPU rows
