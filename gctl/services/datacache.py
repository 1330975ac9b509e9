"""Datasets on the nodes: each node's cache of copies, filled as one tar stream, checked by digest.

A node keeps its copies in its cache directory (``gctl node set
--cache-dir``, default ``WORKDIR/datasets``), each under its key
``NAME@DIGEST[:16]``, managed by the cache agent (:mod:`gctl.hosts.cache_agent`:
fills, checks, least-recently-used eviction within ``--cache-size``). A copy
is filled from a node that holds one, else from the dataset's source: a
node's directory, sent as a single ``tar`` stream through this machine (many
small files move as one stream, and nodes need no access to each other), or
an rsync location the node fetches it from itself. Every copy is checked
against the dataset's digest, and filled again once when it does not match.
A copy whose files changed since it was filled is found at its next use and
filled again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gctl.hosts import cache_agent
from gctl.hosts.ssh import HostError, Pool, Target, fan_out
from gctl.services import hostops
from gctl.store.models import NodeRow

_AGENT = Path(cache_agent.__file__).read_text(encoding="utf-8")
"""The cache agent's source, run by the host's ``python3 -c``."""
COPY_TIMEOUT = 6 * 3600.0
"""Seconds one copy of a dataset may take."""


@dataclass(frozen=True, slots=True)
class Dataset:
    """What filling a copy of a dataset needs: its identity and where it comes from."""

    name: str
    digest: str
    bytes: int
    source: NodeRow | None
    """The node whose directory ``source_path`` is; None: ``source_path`` is an rsync location."""
    source_path: str

    @property
    def key(self) -> str:
        """The copy's directory name in a node's cache."""
        return key(self.name, self.digest)


@dataclass(frozen=True, slots=True)
class Filled:
    """What making sure of a copy on a node did: ``cached`` when it was there already."""

    node: str
    key: str
    cached: bool
    bytes: int = 0
    seconds: float = 0.0
    source: str | None = None
    evicted: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        """MB/s the copy moved at (0 when nothing was timed)."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def describe(self, name: str) -> str:
        """One line for an event: what was copied where, how fast, and what was evicted."""
        rate = self.rate
        gone = f"; evicted {', '.join(self.evicted)}" if self.evicted else ""
        return (
            f"dataset {name} copied to {self.node} from {self.source}: {self.bytes} bytes"
            f" in {self.seconds:.1f} s ({rate:.0f} MB/s){gone}"
        )


key = cache_agent.key


def run(
    pool: Pool,
    target: Target,
    mode: str,
    request: dict[str, Any],
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run one mode of the cache agent on the host; its JSON answer (an error raised)."""
    stdin = json.dumps(request).encode()
    argv = ["python3", "-c", _AGENT, mode]
    res = pool.run_ok(target, argv, f"gctl cache {mode}", stdin=stdin, timeout=timeout)
    got = res.json_object(target.node, f"gctl cache {mode}")
    if "error" in got:
        raise HostError(target.node, f"{mode}: {got['error']}")
    return got


def manifest(pool: Pool, node: NodeRow, path: str) -> dict[str, Any]:
    """The digest, bytes and file count of a directory on a node."""
    return run(pool, hostops.target(node), "manifest", {"dir": path})


def ensure(
    pool: Pool,
    node: NodeRow,
    dataset: Dataset,
    holders: Sequence[NodeRow] = (),
    keep: Collection[str] = (),
    copying: Callable[[str], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Filled:
    """Make sure ``node`` has an intact copy of ``dataset``, filling it when not.

    The copy comes from the first of ``holders`` (nodes with a copy), else
    (or when that holder cannot send it) from the source. ``keep``: copies
    the fill must not evict (besides those the node's containers use). A
    copy that does not match the digest is filled once more, from the
    source; a second mismatch fails the job (``HostError.fails_job``).
    ``copying`` is told where each copy comes from as it begins,
    ``progress`` the bytes copied so far as they go (for copies streamed
    through this machine).
    """
    target, where = hostops.target(node), hostops.cache_dir(node)
    asked = {"dir": where, "key": dataset.key, "digest": dataset.digest}
    checked = run(pool, target, "check", asked)
    if checked.get("cached"):
        return Filled(node.name, dataset.key, cached=True)
    origin = (dataset.source, dataset.source_path)
    held = [(h, f"{hostops.cache_dir(h)}/{dataset.key}") for h in holders if h.name != node.name]
    sources = [*held[:1], origin, origin]  # a holder, else the source; the source once more
    request = {
        "dir": where,
        "key": dataset.key,
        "name": dataset.name,
        "digest": dataset.digest,
        "bytes": dataset.bytes,
        "capacity": None if node.cache_size_mb is None else node.cache_size_mb << 20,
        "docker": hostops.docker_argv(node),
        "keep": sorted(keep),
    }
    mismatches = 0
    for source, path in sources:
        named = path if source is None else source.name
        if copying is not None:
            copying(named)
        try:
            moved, got = _fill(pool, target, source, path, request, progress)
        except _SourceFailed as exc:
            if (source, path) != origin:
                continue  # the holder no longer has its copy (evicted, removed): the source
            raise exc.error from None
        if "error" not in got:
            return Filled(
                node.name,
                dataset.key,
                cached=bool(got.get("cached")),
                bytes=moved or int(got.get("bytes") or 0),
                seconds=float(got.get("seconds") or 0.0),
                source=named,
                evicted=tuple(got.get("evicted") or ()),
            )
        if not got.get("mismatch"):
            raise HostError(node.name, f"dataset {dataset.name}: {got['error']}")
        mismatches += 1
        if mismatches == 2:
            break
    raise HostError(
        node.name,
        f"dataset {dataset.name}: the copy does not match its digest, twice"
        " (has its source changed since 'gctl dataset add'?)",
        fails_job=True,
    )


class _SourceFailed(Exception):
    """The side sending a copy failed (``error``), not the node filling it."""

    def __init__(self, error: HostError) -> None:
        super().__init__(str(error))
        self.error = error


def _fill(
    pool: Pool,
    target: Target,
    source: NodeRow | None,
    path: str,
    request: dict[str, Any],
    progress: Callable[[int], None] | None,
) -> tuple[int, dict[str, Any]]:
    """One fill of the copy on ``target`` from ``path``: the bytes streamed, the agent's answer.

    From a node (``source``) the copy is a tar stream through this machine;
    from an rsync location (``source`` None) the node fetches it itself.
    """
    fill = ["python3", "-c", _AGENT, "fill"]
    name = str(request["name"])
    if source is None:
        header = json.dumps({**request, "fetch": path}).encode() + b"\n"
        into = pool.run(target, fill, stdin=header, timeout=COPY_TIMEOUT)
        moved, sent = 0, None
    else:
        header = json.dumps(request).encode() + b"\n"
        pack = ["tar", "-c", "-C", path, *(f"--exclude=./{f}" for f in cache_agent.OWN), "."]
        try:
            moved, sent, into = pool.pipe(
                hostops.target(source),
                pack,
                target,
                fill,
                header=header,
                timeout=COPY_TIMEOUT,
                progress=progress,
            )
        except HostError as exc:
            if exc.node == source.name:
                raise _SourceFailed(exc) from None
            raise
    if into.rc != 0:
        last = into.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise HostError(target.node, f"dataset {name}: gctl cache fill: {last[0]}")
    got = into.json_object(target.node, "gctl cache fill")
    if source is not None and sent is not None and sent.rc != 0 and not got.get("cached"):
        why = sent.stderr.decode(errors="replace").strip()[-200:]
        raise _SourceFailed(HostError(source.name, f"dataset {name}: reading {path}: {why}"))
    return moved, got


def fetch(pool: Pool, node: NodeRow, name: str, url: str, digest: str | None) -> dict[str, Any]:
    """A new dataset at rsync location ``url``, fetched by ``node``: its manifest, and the key.

    The copy stays in the node's cache (``kept``) when it fits without
    evicting. An error is raised when it cannot be fetched, or does not match
    ``digest`` when one is given.
    """
    request = {
        "dir": hostops.cache_dir(node),
        "name": name,
        "url": url,
        "digest": digest,
        "capacity": None if node.cache_size_mb is None else node.cache_size_mb << 20,
    }
    return run(pool, hostops.target(node), "fetch", request, timeout=COPY_TIMEOUT)


def holdings(pool: Pool, nodes: Iterable[NodeRow]) -> tuple[dict[str, set[str]], set[str]]:
    """Which nodes hold each copy (by key), read from every node's cache at once.

    Also the nodes that answered: one that did not holds nothing here.
    """
    by_target = {hostops.target(n): n for n in nodes}
    got = fan_out(list(by_target), lambda t: listing(pool, by_target[t]))
    held: dict[str, set[str]] = {}
    answered = set()
    for name, answer in got.items():
        if isinstance(answer, HostError):
            continue
        answered.add(name)
        for entry in answer.get("entries") or ():
            held.setdefault(str(entry["key"]), set()).add(name)
    return held, answered


def listing(pool: Pool, node: NodeRow) -> dict[str, Any]:
    """The copies in the node's cache (key, name, digest, bytes, last use) and its free bytes."""
    return run(pool, hostops.target(node), "list", {"dir": hostops.cache_dir(node)})


def remove(pool: Pool, node: NodeRow, copy: str) -> bool:
    """Remove a copy from the node's cache unless a container uses it; whether one was there."""
    request = {"dir": hostops.cache_dir(node), "key": copy, "docker": hostops.docker_argv(node)}
    return bool(run(pool, hostops.target(node), "remove", request).get("removed"))
