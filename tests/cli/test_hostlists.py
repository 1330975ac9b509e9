"""Slurm hostlist expressions wherever commands take node names: gpu[01-04], gpu[01-02,07]."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clikit import ok, run

from gctl.services import hostlists
from gctl.services.errors import ServiceError

FP = ("--host-key-fingerprint", "SHA256:" + "A" * 43)


def test_expressions_expand_in_order_each_name_once() -> None:
    assert hostlists.expand(["gpu[01-03]", "gpu02,cpu[1,3]"]) == [
        "gpu01",
        "gpu02",
        "gpu03",
        "cpu1",
        "cpu3",
    ]
    with pytest.raises(ServiceError, match="names more than 100000 nodes"):
        hostlists.expand(["n[0-99999999]"])  # refused before it is expanded
    with pytest.raises(ServiceError, match=r"node list 'gpu\[01-': "):
        hostlists.expand(["gpu[01-"])


def test_node_commands_and_queue_filters_take_hostlists(gdb: Path) -> None:
    for i in range(1, 6):
        ok(
            "node",
            "add",
            f"gpu{i:02d}",
            "--host",
            f"10.0.0.{i}",
            *FP,
            "--emulate-gpus",
            "1xV100-16GB",
        )
    code, out, err = run("node", "drain", "gpu[02-04]", "--reason", "maintenance")
    assert code == 0, err
    assert out.splitlines() == [f"node gpu0{i} is now drain*" for i in (2, 3, 4)]  # * never seen
    listed = json.loads(ok("node", "ls", "gpu[01-05]", "--json"))
    assert {n["name"]: n["state"] for n in listed} == {
        "gpu01": "idle",
        "gpu02": "drain",
        "gpu03": "drain",
        "gpu04": "drain",
        "gpu05": "idle",
    }
    code, _, err = run("node", "resume", "gpu[04-09]")  # gpu06.. are unknown: nothing done
    assert code == 1 and "unknown node 'gpu06'" in err
    assert json.loads(ok("node", "show", "gpu04", "--json"))["state"] == "drain"
    assert run("queue", "-w", "gpu[01-05]")[0] == 0
    code, _, err = run("queue", "-w", "gpu[01-")
    assert code == 1 and err.startswith("gctl: error: node list 'gpu[01-'")
