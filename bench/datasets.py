"""Dataset copy to a node: one packed tar stream against a per-file copy (issue 23).

Target: a 200 MB dataset of 20,000 small files reaches a node as a packed
stream; this measures how long that takes next to copying the same files one
by one. Made here: ``--files`` files of ``--size-kb`` kB of seeded random
bytes each (default 20,000 x 10 kB = 200 MB), in directories of 500, in a
temporary directory; the two local test hosts (real sshd, emulated GPUs)
share this machine's filesystem, so it is the dataset ``h1:/that/path``.

- Manifest at the source: ``gctl dataset add`` (:func:`gctl.services.datasets.add`),
  which hashes every file on h1 over SSH.
- Packed fill: ``gctl dataset warm`` of h2 (:func:`gctl.services.datasets.warm`,
  i.e. :func:`gctl.services.datacache.ensure`) into a fresh, empty cache
  directory: ``tar -c`` on h1, the stream relayed through this machine over
  the pooled SSH connections, unpacked by the cache agent on h2 and checked
  against the digest there (the check is part of the time). Wall time from
  the call to its return, and the cache agent's own time on h2 (receiving
  and unpacking the stream, then checking the digest).
- Second warm of the same dataset: the copy is found cached; the time of
  that check.
- Per-file copy, the baseline gctl avoids: SFTP sessions on the same pooled
  connections to h1 and h2; the source tree is listed on h1 and every file
  read from h1 and written to h2 (directories made as met), one after
  another, through this machine. Not checked within the time; afterwards
  the copy's manifest on h2 must match the dataset's digest.

Both SSH connections are open, and the disks synced, before anything is
timed. With ``--repeat N`` the fills and copies run N times (fresh
directories each time; each run's figures are printed) and the median is
reported. Starts the test hosts with
``scripts/testhosts.sh start 2`` and stops them at the end (hosts that were
already running are left running); needs root, and must not run beside the
host tests (both use hosts h1 and h2). Run:
``.venv/bin/python bench/datasets.py [--files 20000] [--size-kb 10] [--repeat 1]``
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import random
import shutil
import stat
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gctl.hosts.ssh import Pool
from gctl.services import datacache, datasets, db, hostops, nodes
from gctl.store.engine import transaction
from gctl.store.models import NodeRow

REPO = Path(__file__).resolve().parents[1]
PER_DIR = 500
"""Files per directory of the made dataset."""
NAME = "bench-small-files"
READ_AHEAD = 32768
"""Files larger than one SFTP read request are prefetched (reads pipelined)."""


# --- test hosts ----------------------------------------------------------------------------------


def _testhosts(*argv: str) -> dict[str, Any]:
    """Run ``scripts/testhosts.sh ARGV`` and return the JSON its last line of stdout has."""
    out = subprocess.run(
        [str(REPO / "scripts" / "testhosts.sh"), *argv],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(f"testhosts.sh {' '.join(argv)}: {out.stderr.strip()[-2000:]}")
    lines = out.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def _hosts_up() -> bool:
    """Whether test hosts h1 and h2 already run (then they are someone's: left running)."""
    try:
        found = _testhosts("env").get("hosts", [])
    except (RuntimeError, ValueError):
        return False
    up = {h["name"] for h in found if h["ssh_running"] and h["docker_running"]}
    return {"h1", "h2"} <= up


def _host_store(info: dict[str, Any], path: Path) -> db.Store:
    """A SQLite store at ``path`` with test hosts h1 and h2 as nodes of one emulated GPU each."""
    store = db.connect(str(path))
    db.upgrade(store)
    for h in info["hosts"]:
        if h["name"] in ("h1", "h2"):
            nodes.add_node(
                store, h["name"], h["host"], port=h["port"], ssh_user=h["user"],
                key_path=info["key"], emulate_gpus="1xV100-16GB",
                host_key_fingerprint=h["fingerprint"], work_dir=h["work_dir"],
            )  # fmt: skip
    return store


def _row(store: db.Store, name: str) -> NodeRow:
    """The node's row, detached from its session."""
    with transaction(store.engine, write=False) as s:
        row = s.scalar(select(NodeRow).where(NodeRow.name == name))
        assert row is not None, name
        s.expunge(row)
        return row


# --- the dataset and the two copies --------------------------------------------------------------


def make_dataset(root: Path, files: int, size: int, seed: int) -> int:
    """``files`` files of ``size`` seeded random bytes under ``root``, 500 a directory; bytes."""
    rng = random.Random(seed)
    for i in range(files):
        shard = root / f"shard-{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            shard.mkdir(parents=True)
        (shard / f"sample-{i:06d}.bin").write_bytes(rng.randbytes(size))
    return files * size


def per_file_copy(pool: Pool, source: NodeRow, node: NodeRow, src: str, dest: str) -> int:
    """Copy the tree ``src`` on ``source`` to ``dest`` on ``node`` file by file over SFTP; bytes.

    Every file is read whole from the source, then written whole to the
    node, through this machine; the source tree is listed as it goes.
    """
    get = pool.client(hostops.target(source)).open_sftp()
    put = pool.client(hostops.target(node)).open_sftp()
    moved = 0
    try:
        pending = [""]
        while pending:
            rel = pending.pop()
            put.mkdir(posixpath.join(dest, rel).rstrip("/"))
            entries = get.listdir_attr(posixpath.join(src, rel).rstrip("/"))
            for entry in sorted(entries, key=lambda e: e.filename):
                child = posixpath.join(rel, entry.filename)
                mode, size = entry.st_mode or 0, entry.st_size or 0
                if stat.S_ISDIR(mode):
                    pending.append(child)
                    continue
                if not stat.S_ISREG(mode):
                    raise RuntimeError(f"{child}: not a regular file or directory")
                with get.open(posixpath.join(src, child), "rb") as fh:
                    if size > READ_AHEAD:
                        fh.prefetch(size)
                    data = fh.read(size)
                with put.open(posixpath.join(dest, child), "wb") as fh:
                    fh.set_pipelined(True)
                    fh.write(data)
                moved += len(data)
    finally:
        get.close()
        put.close()
    return moved


# --- the runs ------------------------------------------------------------------------------------


def _mb(n: float) -> float:
    return n / 1e6


def run_once(
    store: db.Store,
    pool: Pool,
    rows: dict[str, NodeRow],
    view: Any,
    tmp: Path,
    n: int,
    show: bool,
) -> dict[str, float]:
    """One packed fill, one second warm and one per-file copy into fresh directories.

    ``show``: print this run's figures (when there are several runs).
    """
    cache = tmp / f"cache-{n}"
    nodes.set_cache(store, "h2", str(cache), None)

    os.sync()  # earlier writes flushed, so their writeback is not timed here
    began = time.perf_counter()
    first = datasets.warm(store, NAME, ["h2"], pool)[0]
    packed = time.perf_counter() - began
    if first.cached:
        raise RuntimeError(f"h2's fresh cache {cache} already had {first.key}")
    if not (cache / first.key).is_dir():
        raise RuntimeError(f"the packed fill left no copy at {cache / first.key}")

    began = time.perf_counter()
    second = datasets.warm(store, NAME, ["h2"], pool)[0]
    check = time.perf_counter() - began
    if not second.cached:
        raise RuntimeError("the second warm filled the copy again instead of finding it cached")

    dest = tmp / f"per-file-{n}"
    os.sync()  # earlier writes flushed, so their writeback is not timed here
    began = time.perf_counter()
    moved = per_file_copy(pool, rows["h1"], rows["h2"], view.source.partition(":")[2], str(dest))
    per_file = time.perf_counter() - began
    got = datacache.manifest(pool, rows["h2"], str(dest))
    if got["digest"] != view.digest or moved != view.bytes:
        raise RuntimeError(f"the per-file copy at {dest} does not match the dataset: {got}")

    if show:
        print(
            f"  run {n + 1}: packed fill {packed:.2f} s ({_mb(view.bytes) / packed:.1f} MB/s;"
            f" {_mb(first.bytes):.1f} MB of tar stream; h2's agent receiving, unpacking, checking"
            f" {first.seconds:.2f} s); second warm: already cached, checked in"
            f" {check * 1000:.0f} ms;"
            f" per-file copy {per_file:.2f} s ({_mb(moved) / per_file:.1f} MB/s,"
            f" {view.files / per_file:,.0f} files/s; its copy matches the digest)"
        )
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    return {
        "packed": packed,
        "agent": first.seconds,
        "stream": float(first.bytes),
        "check": check,
        "per_file": per_file,
    }


def bench(info: dict[str, Any], args: argparse.Namespace, tmp: Path) -> None:
    """Make the dataset, add it, and time the copies ``--repeat`` times."""
    source = tmp / "source"
    began = time.perf_counter()
    total = make_dataset(source, args.files, args.size_kb * 1000, args.seed)
    made = time.perf_counter() - began
    store = _host_store(info, tmp / "datasets.db")
    rows = {name: _row(store, name) for name in ("h1", "h2")}
    with Pool() as pool:
        os.sync()  # earlier writes flushed, so their writeback is not timed here
        began = time.perf_counter()
        view = datasets.add(store, NAME, f"h1:{source}", None, pool)
        manifest = time.perf_counter() - began
        if view.files != args.files or view.bytes != total:
            raise RuntimeError(f"manifest counts {view.files} files, {view.bytes} bytes")
        print(
            f"dataset: {view.files:,} files of {args.size_kb} kB, {_mb(view.bytes):.1f} MB"
            f" ({view.bytes:,} bytes) in {-(-view.files // PER_DIR)} directories at h1:{source}"
            f" (made here in {made:.1f} s, seed {args.seed})"
        )
        print(
            f"manifest at the source (gctl dataset add): {manifest:.2f} s"
            f" ({_mb(view.bytes) / manifest:.1f} MB/s), digest {view.digest[:16]}"
        )
        for row in rows.values():  # both connections open before any timing, as for the copy
            pool.client(hostops.target(row))
        show = args.repeat > 1
        runs = [run_once(store, pool, rows, view, tmp, n, show) for n in range(args.repeat)]

    def mid(what: str) -> float:
        return statistics.median(r[what] for r in runs)

    packed, per_file = mid("packed"), mid("per_file")
    of = f" (median of {len(runs)})" if len(runs) > 1 else ""
    print(f"h1 -> h2 through this machine over SSH{of}:")
    print(
        f"  packed fill (gctl dataset warm): {packed:.2f} s, {_mb(view.bytes) / packed:.1f} MB/s"
        f" (h2's cache agent receiving, unpacking and checking the digest: {mid('agent'):.2f} s;"
        f" tar stream {_mb(mid('stream')):.1f} MB)"
    )
    print(f"  second warm: already cached, checked in {mid('check') * 1000:.0f} ms")
    print(
        f"  per-file copy (SFTP, file by file): {per_file:.2f} s,"
        f" {_mb(view.bytes) / per_file:.1f} MB/s, {view.files / per_file:,.0f} files/s"
    )
    print(f"  per-file / packed: {per_file / packed:.1f}x ({per_file - packed:.1f} s saved)")


def main() -> None:
    """Parse the options, start the test hosts, run, clean up."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000, help="files in the dataset")
    parser.add_argument("--size-kb", type=int, default=10, help="size of each file, kB")
    parser.add_argument("--repeat", type=int, default=1, help="fills and copies to time")
    parser.add_argument("--seed", type=int, default=0, help="seed of the files' bytes")
    args = parser.parse_args()
    if args.files < 1 or args.size_kb < 0 or args.repeat < 1:
        parser.error("--files and --repeat must be at least 1, --size-kb at least 0")
    already = _hosts_up()
    info = _testhosts("start", "2")
    try:
        with tempfile.TemporaryDirectory(prefix="gctl-bench-datasets-") as name:
            bench(info, args, Path(name))
    finally:
        if not already:
            _testhosts("stop")


if __name__ == "__main__":
    main()
