"""Keeping NVIDIA dcgm-exporter's HPC job mapping files current on every node.

dcgm-exporter, started with ``--hpc-job-mapping-dir DIR`` (or
``DCGM_HPC_JOB_MAPPING_DIR``), labels each GPU's metrics with ``hpc_job``:
it reads every file of DIR whose name is a GPU index (``0``, ``1``, ...;
other names, dot-files included, are skipped) and takes each line as the id
of a job on that GPU, one labelled copy of the GPU's metrics per job. A GPU
with no file keeps its metrics unlabelled; a GPU with an *empty* file loses
them altogether, so the file of an idle GPU is removed, never emptied.

gctl writes, on each node, one file per GPU that jobs hold, with their
gctl job ids in ascending order. Each file is replaced atomically (written
aside, then renamed), and only when its content changes. The names gctl
wrote are kept in ``DIR/.gctl-owned``, so a file of a GPU the store no
longer records is removed too; files gctl does not own (a MIG instance's
``0.1``, anything else) are left alone.
"""

from __future__ import annotations

import json
import posixpath

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.hosts.ssh import HostError, Pool, Target, fan_out
from gctl.services import hostops
from gctl.services.db import Store
from gctl.services.nodes import named_rows
from gctl.store.engine import transaction
from gctl.store.models import AllocationRow, GpuRow, NodeRow

_NOT_FOUND = 127
"""The shell's exit status for a command it cannot find."""

SCRIPT = """\
import json, os, sys, tempfile

d = sys.argv[1]
want = {name: "".join("%d\\n" % j for j in jobs) for name, jobs in json.load(sys.stdin).items()}
os.makedirs(d, 0o755, exist_ok=True)


def read(name):
    try:
        with open(os.path.join(d, name)) as f:
            return f.read()
    except FileNotFoundError:
        return None


def put(name, text):
    fd, tmp = tempfile.mkstemp(prefix=".gctl-", suffix=".tmp", dir=d)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o644)
        f.write(text)
    os.replace(tmp, os.path.join(d, name))


def drop(name):
    try:
        os.unlink(os.path.join(d, name))
    except FileNotFoundError:
        pass


for name in os.listdir(d):
    if name.startswith(".gctl-") and name.endswith(".tmp"):
        drop(name)
owned = set((read(".gctl-owned") or "").split())
for name in sorted(set(want) | owned):
    text = want.get(name, "")
    if not text:
        drop(name)
    elif read(name) != text:
        put(name, text)
ledger = "".join(name + "\\n" for name in sorted(want) if want[name])
if read(".gctl-owned") != ledger:
    put(".gctl-owned", ledger)
"""
"""Run on the host as ``python3 -c SCRIPT DIR`` with ``{"GPU index": [job ids]}`` on stdin."""


def mapping(store: Store) -> dict[str, dict[int, list[int]]]:
    """Every node's GPUs (by index), each with the ids of the jobs holding it, ascending."""
    with transaction(store.engine, write=False) as s:
        return _read(s)[1]


def sync(store: Store, pool: Pool, directory: str) -> dict[str, HostError | None]:
    """Bring every node's job mapping files in ``directory`` up to date with the store.

    The store is read once and released before any host is contacted; the
    hosts are written at once. Each node gets None, or the HostError that
    kept its files from being written. ValueError for a relative directory.
    """
    if not posixpath.isabs(directory):
        raise ValueError(f"job mapping directory {directory!r}: give an absolute path")
    with transaction(store.engine, write=False) as s:
        targets, files = _read(s)

    def write(target: Target) -> None:
        doc = {str(index): jobs for index, jobs in files[target.node].items()}
        argv = ["python3", "-c", SCRIPT, directory]
        res = pool.run(target, argv, stdin=json.dumps(doc).encode())
        if res.rc == _NOT_FOUND:
            raise HostError(target.node, "no python3 on the host to write job mapping files")
        if res.rc != 0:
            lines = res.stderr.decode(errors="replace").strip().splitlines() or [f"exit {res.rc}"]
            raise HostError(target.node, f"job mapping files in {directory}: {lines[-1]}")

    return fan_out(targets, write)


def _read(s: Session) -> tuple[list[Target], dict[str, dict[int, list[int]]]]:
    """Every node's SSH target, and its GPUs with the jobs holding them."""
    rows = named_rows(s, None)
    files: dict[str, dict[int, list[int]]] = {r.name: {g.index: [] for g in r.gpus} for r in rows}
    held = s.execute(
        select(NodeRow.name, GpuRow.index, AllocationRow.job_id)
        .join(GpuRow, AllocationRow.gpu_id == GpuRow.id)
        .join(NodeRow, NodeRow.id == GpuRow.node_id)
        .order_by(AllocationRow.job_id)
    )
    for node, index, job in held:
        files[node][index].append(job)
    return [hostops.target(r) for r in rows], files
