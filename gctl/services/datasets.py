"""``gctl dataset``: named datasets at a source on a node, and their copies in the nodes' caches.

A dataset is a directory on one of the nodes (``NODE:/path``) or at an rsync
location the nodes fetch it from (``rsync://HOST/MODULE/PATH``,
``HOST::MODULE/PATH``, or ``[USER@]HOST:/PATH`` over the nodes' own SSH),
recorded with its manifest digest (paths, sizes, content hashes), size and
file count when it is added; a changed source is a new dataset (remove and
add it again).
Jobs name datasets at submit (``--dataset NAME[:/mount]``); the daemon fills
the node's cache before the job starts and mounts the copy read-only
(:mod:`gctl.services.datacache`). Adding and removing datasets is for
operators; every user may list them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gctl.hosts.ssh import HostError, Pool
from gctl.limits import SAFE_NAME, TEXT_MAX, check_text, shown
from gctl.services import access, datacache, events
from gctl.services.db import Store
from gctl.services.errors import NotFound, ServiceError
from gctl.services.nodes import named_rows
from gctl.services.queue import FINISHED
from gctl.services.specs import dataset_entry
from gctl.store.engine import transaction
from gctl.store.models import DatasetRow, JobRow, NodeRow

_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class DatasetView:
    """A dataset as ``ls``/``show`` give it; ``cached`` (show only): nodes holding a copy."""

    name: str
    source: str
    digest: str
    bytes: int
    files: int
    user: str
    created_at: float
    cached: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["cached"] = None if self.cached is None else list(self.cached)
        return out


def check_name(name: str) -> str:
    """A dataset name: letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit."""
    if not SAFE_NAME.fullmatch(name):
        raise ServiceError(
            f"dataset name {shown(name)}: use letters, digits, '.', '_' or '-' (max 63)"
        )
    return name


_SSH_PLACE = re.compile(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*")
"""``[USER@]HOST`` of an SSH location."""
_RSYNCD = re.compile(r"(?:rsync://[A-Za-z0-9][^\s/]*/|[A-Za-z0-9][A-Za-z0-9.-]*::)\S*")
"""An rsync daemon location: ``rsync://HOST[:PORT]/MODULE/PATH`` or ``HOST::MODULE/PATH``."""


def parse_source(text: str) -> tuple[str | None, str]:
    """A source as ``(place, path)``: ``NODE:/path`` or ``[USER@]HOST:/path``; rsync daemon URLs.

    For ``PLACE:/path`` the caller decides: a registered node's directory,
    else an SSH location the nodes fetch with rsync. An rsync daemon location
    is ``(None, text)``.
    """
    check_text(text, "SOURCE", limit=TEXT_MAX)
    if _RSYNCD.fullmatch(text):
        return None, text
    place, sep, path = text.partition(":")
    if not sep or not _SSH_PLACE.fullmatch(place) or not path.startswith("/") or "\n" in path:
        raise ServiceError(
            f"source {shown(text)}: expected NODE:/absolute/path or an rsync location"
            " (rsync://HOST/MODULE/PATH, HOST::MODULE/PATH, [USER@]HOST:/PATH)"
        )
    return place, path.rstrip("/") or "/"


def source_text(row: DatasetRow) -> str:
    """Where a dataset is, as ``gctl dataset add`` was given it."""
    return row.source_path if row.source_node is None else f"{row.source_node}:{row.source_path}"


def _view(row: DatasetRow, cached: tuple[str, ...] | None = None) -> DatasetView:
    return DatasetView(
        row.name,
        source_text(row),
        row.digest,
        row.bytes,
        row.files,
        row.user,
        row.created_at,
        cached,
    )


def add(
    store: Store,
    name: str,
    source: str,
    digest: str | None,
    pool: Pool,
    via: str | None = None,
) -> DatasetView:
    """Record a dataset after reading its manifest at the source (which must match ``digest``).

    A node's directory is read where it is. An rsync location is fetched by
    the node ``via`` (default: the first node in service by name), whose
    cache keeps that copy when it fits.
    """
    me = access.operator_only(store, "gctl dataset add")
    check_name(name)
    place, path = parse_source(source)
    if digest is not None and not _DIGEST.fullmatch(digest):
        raise ServiceError(f"--digest {shown(digest)}: expected 64 hex digits (SHA-256)")
    with transaction(store.engine, write=False) as s:
        _refuse_existing(s, name)
        node = None if place is None else s.scalar(select(NodeRow).where(NodeRow.name == place))
        remote = node is None
        if node is None:
            node = _fetcher(s, via)
        elif via is not None:
            raise ServiceError(f"--via is for rsync locations; {source} is on node {place}")
        s.expunge(node)
    try:
        if remote:
            got = datacache.fetch(pool, node, name, source, digest)
        else:
            got = datacache.manifest(pool, node, path)
    except HostError as exc:
        how = (
            f" (no node is named {place}: fetched over SSH by {node.name})"
            if remote and place
            else ""
        )
        raise ServiceError(f"reading {source}{how}: {exc}") from None
    if digest is not None and got["digest"] != digest:
        raise ServiceError(f"{source} does not match --digest: its manifest is {got['digest']}")
    with transaction(store.engine, write=True) as s:
        _refuse_existing(s, name)  # again: it may have been added while the source was read
        row = DatasetRow(
            name=name,
            source_node=None if remote else place,
            source_path=source if remote else path,
            digest=str(got["digest"]),
            bytes=int(got["bytes"]),
            files=int(got["files"]),
            user=me.name,
        )
        s.add(row)
        s.flush()
        fetched = f" (fetched by {node.name})" if remote else ""
        message = (
            f"dataset {name} added from {source}{fetched}: {row.files} files, {row.bytes} bytes"
        )
        events.record(s, "dataset.add", message, data={"name": name, "digest": row.digest})
        return _view(row)


def _fetcher(s: Session, via: str | None) -> NodeRow:
    """The node that fetches a new dataset from an rsync location: ``via``, else the first up."""
    query = select(NodeRow).order_by(NodeRow.name)
    if via is not None:
        node = s.scalar(query.where(NodeRow.name == via))
        if node is None:
            raise NotFound(f"unknown node {via!r} (--via)")
        return node
    node = s.scalar(query.where(NodeRow.admin_state == "up"))
    if node is None:
        raise ServiceError("no node in service to fetch it with: add one, or name one with --via")
    return node


def _refuse_existing(s: Session, name: str) -> None:
    if s.scalar(select(DatasetRow.id).where(DatasetRow.name == name)) is not None:
        raise ServiceError(f"dataset {name!r} already exists (gctl dataset rm it first)")


def list_all(store: Store) -> list[DatasetView]:
    """Every dataset, by name."""
    with transaction(store.engine, write=False) as s:
        return [_view(r) for r in s.scalars(select(DatasetRow).order_by(DatasetRow.name))]


def _get(store: Store, name: str) -> DatasetRow:
    check_name(name)
    with transaction(store.engine, write=False) as s:
        row = s.scalar(select(DatasetRow).where(DatasetRow.name == name))
        if row is None:
            raise NotFound(f"unknown dataset {name!r} (gctl dataset ls)")
        s.expunge(row)
        return row


def show(store: Store, name: str, pool: Pool) -> DatasetView:
    """One dataset, with the nodes that hold an intact-looking copy now (asked over SSH)."""
    row = _get(store, name)
    with transaction(store.engine, write=False) as s:
        nodes = named_rows(s, None)
        for n in nodes:
            s.expunge(n)
    held, _ = datacache.holdings(pool, nodes)
    return _view(row, tuple(sorted(held.get(datacache.key(row.name, row.digest), ()))))


def remove(store: Store, name: str) -> None:
    """Forget a dataset no unfinished job names (node copies go when their space is needed)."""
    access.operator_only(store, "gctl dataset rm")
    check_name(name)
    with transaction(store.engine, write=True) as s:
        row = s.scalar(select(DatasetRow).where(DatasetRow.name == name))
        if row is None:
            raise NotFound(f"unknown dataset {name!r} (gctl dataset ls)")
        users = [
            j.id
            for j in s.scalars(select(JobRow).where(JobRow.state.not_in(sorted(FINISHED))))
            if any(dataset_entry(d)[0] == name for d in j.datasets)
        ]
        if users:
            ids = ", ".join(map(str, users[:10]))
            raise ServiceError(f"dataset {name!r} is named by unfinished job(s) {ids}")
        s.delete(row)
        events.record(s, "dataset.rm", f"dataset {name} removed", data={"name": name})


def warm(store: Store, name: str, node_names: list[str], pool: Pool) -> list[datacache.Filled]:
    """Fill the named nodes' caches with the dataset now; what each fill did."""
    access.operator_only(store, "gctl dataset warm")
    row = _get(store, name)
    with transaction(store.engine, write=False) as s:
        nodes = named_rows(s, node_names or None)
        source = None
        if row.source_node is not None:
            source = s.scalar(select(NodeRow).where(NodeRow.name == row.source_node))
        for n in [*nodes, *([source] if source is not None else [])]:
            s.expunge(n)
    if source is None and row.source_node is not None:
        raise ServiceError(f"dataset {name}: its source node {row.source_node!r} was removed")
    dataset = datacache.Dataset(row.name, row.digest, row.bytes, source, row.source_path)
    out: list[datacache.Filled] = []
    for node in nodes:  # one after another: a later node can copy from an earlier one
        holders = [n for n in nodes if any(f.node == n.name for f in out)]
        try:
            filled = datacache.ensure(pool, node, dataset, holders[::-1])
        except HostError as exc:
            raise ServiceError(f"warming {name} on {node.name}: {exc}") from None
        out.append(filled)
        if not filled.cached:
            with transaction(store.engine, write=True) as s:
                events.record(s, "dataset.fill", filled.describe(name), node=node.name)
    return out
