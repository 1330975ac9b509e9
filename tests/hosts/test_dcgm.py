"""dcgm-exporter job mapping files, written on the test hosts over SSH.

The test hosts share this machine's filesystem, so only one of them (h1)
stays a node while files are written: two nodes would write one directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from gctl.daemon import dcgm
from gctl.hosts.ssh import HostError, Pool
from gctl.services import db, jobs, nodes, specs
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow

FP = "SHA256:" + "A" * 43


def _running(store: db.Store, node: str, indices: list[int], mode: str = "exclusive") -> int:
    """A job holding the node's GPUs ``indices``, as the daemon records a placement."""
    req = specs.build(image="gctl-test/train:1", command=["true"], gpus=len(indices))
    (job,) = jobs.submit(store, [req])
    with transaction(store.engine, write=True) as s:
        row = s.get(JobRow, job)
        assert row is not None
        row.state = "RUNNING"
        gpus = s.scalars(
            select(GpuRow).join(GpuRow.node).where(NodeRow.name == node, GpuRow.index.in_(indices))
        ).all()
        s.add_all(AllocationRow(job_id=job, gpu_id=g.id, mode=mode) for g in gpus)
    return job


def _files(d: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.iterdir()) if p.is_file()}


def test_mapping_lists_every_gpu_with_the_jobs_holding_it(host_store: db.Store) -> None:
    assert dcgm.mapping(host_store) == {"h1": {0: [], 1: []}, "h2": {0: [], 1: []}}
    a = _running(host_store, "h1", [0, 1])
    b = _running(host_store, "h1", [1], mode="packed")
    c = _running(host_store, "h2", [1])
    assert dcgm.mapping(host_store) == {"h1": {0: [a], 1: [a, b]}, "h2": {0: [], 1: [c]}}


def test_sync_keeps_the_files_current(host_store: db.Store, pool: Pool, tmp_path: Path) -> None:
    nodes.remove_node(host_store, "h2")
    # Nothing listens there: that node fails, the others go on.
    nodes.add_node(host_store, "gone", "127.0.2.250", port=2222, host_key_fingerprint=FP)
    d = tmp_path / "dcgm"
    d.mkdir()
    (d / "1").write_text("999\n")  # stale: gctl's GPU 1 holds no job 999
    (d / "0.1").write_text("mig-job\n")  # a MIG instance's file: not gctl's
    (d / ".gctl-crashed.tmp").write_text("half")  # left by an interrupted write
    a = _running(host_store, "h1", [0, 1])
    b = _running(host_store, "h1", [1], mode="packed")

    got = dcgm.sync(host_store, pool, str(d))
    assert got["h1"] is None
    assert isinstance(got["gone"], HostError)
    assert "127.0.2.250" in str(got["gone"])
    assert set(got) == {"h1", "gone"}
    assert _files(d) == {
        ".gctl-owned": "0\n1\n",
        "0": f"{a}\n",
        "0.1": "mig-job\n",
        "1": f"{a}\n{b}\n",
    }
    assert {oct((d / n).stat().st_mode & 0o777) for n in ("0", "1")} == {"0o644"}
    inode = (d / "1").stat().st_ino

    assert dcgm.sync(host_store, pool, str(d))["h1"] is None  # nothing changed: nothing written
    assert (d / "1").stat().st_ino == inode

    with transaction(host_store.engine, write=True) as s:  # job a ends
        s.execute(delete(AllocationRow).where(AllocationRow.job_id == a))
    assert dcgm.sync(host_store, pool, str(d))["h1"] is None
    # An idle GPU's file goes: dcgm-exporter would drop the metrics of a GPU with an empty one.
    assert _files(d) == {".gctl-owned": "1\n", "0.1": "mig-job\n", "1": f"{b}\n"}
    assert (d / "1").stat().st_ino != inode  # replaced by a rename, never rewritten in place

    with transaction(host_store.engine, write=True) as s:  # GPU 1 leaves the inventory
        s.execute(delete(GpuRow).where(GpuRow.index == 1))
    assert dcgm.mapping(host_store)["h1"] == {0: []}
    assert dcgm.sync(host_store, pool, str(d))["h1"] is None
    assert _files(d) == {".gctl-owned": "", "0.1": "mig-job\n"}  # gctl's own stale file went
    assert not any(n.endswith(".tmp") for n in os.listdir(d))


def test_a_host_that_cannot_write_is_reported(
    host_store: db.Store, pool: Pool, tmp_path: Path
) -> None:
    nodes.remove_node(host_store, "h2")
    (tmp_path / "plain-file").write_text("")
    got = dcgm.sync(host_store, pool, str(tmp_path / "plain-file" / "dcgm"))
    err = got["h1"]
    assert isinstance(err, HostError)
    assert str(err).startswith(f"h1: job mapping files in {tmp_path}/plain-file/dcgm: ")
    assert "Not a directory" in str(err) and "\n" not in str(err)


def test_a_relative_directory_is_refused(host_store: db.Store, pool: Pool) -> None:
    with pytest.raises(ValueError, match="give an absolute path"):
        dcgm.sync(host_store, pool, "run/dcgm")
