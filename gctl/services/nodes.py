"""Node use cases: add, list (sinfo-like), show, drain/undrain/down/resume, remove.

A node's state is shown in Slurm's words: ``idle``, ``mix``, ``alloc`` from
its GPUs in use, ``drng`` (drained but jobs still on it), ``drain`` and
``down`` from the operator's last word, with ``*`` when the node has not
answered within the heartbeat timeout (or never has).
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from gctl.config import DEFAULT_WORK_DIR, node_cache_dir
from gctl.limits import (
    NAME_MAX,
    SAFE_NAME,
    SPEC_ITEMS_MAX,
    TEXT_MAX,
    check_int,
    check_text,
    shown,
)
from gctl.services import access, events, hostlists
from gctl.services.db import Store
from gctl.services.errors import NotFound, ServiceError
from gctl.services.specs import SpecError, parse_size_mb
from gctl.sim.cluster_spec import ClusterSpecError, node_gpus, parse_cluster, parse_gpu_kind
from gctl.store.engine import transaction

if TYPE_CHECKING:
    from gctl.hosts.ssh import HostKey, Target

from gctl.store.models import AllocationRow, GpuRow, JobRow, NodeRow, now, utc

DEFAULT_SSH_PORT = 22
HEARTBEAT_TIMEOUT = 60.0
"""Seconds without an answer after which a node is shown as not responding."""
_EMULATE = re.compile(r"([0-9]{1,2})\s*[xX]\s*(\S+)")
_FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
"""One label of a host name, after IDNA (``_`` too: ``~/.ssh/config`` aliases may have it)."""
_ADMIN = {"drain": "drain", "undrain": "up", "down": "down", "resume": "up"}


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU of a node."""

    index: int
    model: str
    memory_mb: int
    socket: int
    pcie_switch: int
    uuid: str | None
    emulated: bool
    jobs: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "index": self.index,
            "model": self.model,
            "memory_mb": self.memory_mb,
            "socket": self.socket,
            "pcie_switch": self.pcie_switch,
            "uuid": self.uuid,
            "emulated": self.emulated,
            "jobs": list(self.jobs),
        }


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as ``gctl node ls`` and ``gctl node show`` present it."""

    name: str
    host: str
    port: int
    ssh_user: str | None
    state: str
    responding: bool
    gpus_total: int
    gpus_used: int
    height: float
    affinity: int
    gpu_kinds: str
    emulated: bool
    reason: str | None
    reason_user: str | None
    reason_time: float | None
    last_seen: float | None
    last_error: str | None
    host_key_fingerprint: str | None
    docker_host: str | None
    work_dir: str
    gpus: tuple[GpuView, ...] = field(default=())
    cache_dir: str = ""
    """Where the node caches datasets."""
    cache_size_mb: int | None = None
    """The most its dataset cache may hold (None: its disk's free space)."""

    @property
    def state_flag(self) -> str:
        """The state with Slurm's ``*`` when the node is not responding."""
        return self.state + ("" if self.responding else "*")

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stable keys; times as UTC datetimes (``emit_json`` writes ISO 8601)."""
        return {
            "name": self.name,
            "host": self.host,
            "port": self.port,
            "user": self.ssh_user,
            "state": self.state,
            "responding": self.responding,
            "gpus_total": self.gpus_total,
            "gpus_used": self.gpus_used,
            "height": round(self.height, 3),
            "affinity": self.affinity,
            "gpu_kinds": self.gpu_kinds,
            "emulated": self.emulated,
            "reason": self.reason,
            "reason_user": self.reason_user,
            "reason_time": utc(self.reason_time),
            "last_seen": utc(self.last_seen),
            "last_error": self.last_error,
            "host_key_fingerprint": self.host_key_fingerprint,
            "docker_host": self.docker_host,
            "work_dir": self.work_dir,
            "cache_dir": self.cache_dir,
            "cache_size_mb": self.cache_size_mb,
            "gpus": [g.to_dict() for g in self.gpus],
        }


def parse_emulated(text: str) -> list[GpuRow]:
    """GPU rows for ``--emulate-gpus``: ``NxTYPE-MEM[,NxTYPE-MEM...]`` or a one-node ``.toml`` file.

    ``4xV100-16GB`` gets the default PCIe layout; ``2xK80-12GB,2xV100-16GB``
    a node of mixed models, numbered in that order, in the layout of its
    total count; the file, in ``gctl sim``'s cluster format with one
    ``[[nodes]]`` table, can also say ``topology = "nvlink"``.
    """
    try:
        if text.endswith(".toml"):
            found = parse_cluster(text).nodes
            if len(found) != 1:
                raise ClusterSpecError(f"describes {len(found)} nodes; give exactly one")
            gpus = found[0].gpus
        else:
            kinds: list[tuple[str, int]] = []
            for part in text.split(","):
                m = _EMULATE.fullmatch(part.strip())
                if m is None:
                    raise ServiceError(
                        f"--emulate-gpus {shown(text)}: expected COUNTxTYPE-MEMORY"
                        " (e.g. 4xV100-16GB, or 2xK80-12GB,2xV100-16GB) or a .toml file"
                    )
                kinds += [parse_gpu_kind(m.group(2))] * int(m.group(1))
            layout = node_gpus(len(kinds), gpu_type=kinds[0][0], memory_mb=kinds[0][1])
            gpus = tuple(
                replace(g, type=model, memory_mb=memory_mb)
                for g, (model, memory_mb) in zip(layout, kinds, strict=True)
            )
    except ClusterSpecError as exc:
        raise ServiceError(f"--emulate-gpus {shown(text)}: {exc}") from None
    return [
        GpuRow(
            index=g.index,
            model=g.type,
            memory_mb=g.memory_mb,
            socket=g.socket,
            pcie_switch=g.pcie_switch,
            nvlink_peers=[list(p) for p in g.nvlink],
            emulated=True,
        )
        for g in gpus
    ]


def check_name(name: str) -> str:
    """A node name: letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit."""
    if not SAFE_NAME.fullmatch(name):
        raise ServiceError(
            f"node name {shown(name)}: use letters, digits, '.', '_' or '-' (max 63)"
        )
    return name


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node to record: how to reach its host, its confirmed host key, and its settings."""

    name: str
    host: str
    host_key_fingerprint: str
    port: int = DEFAULT_SSH_PORT
    ssh_user: str | None = None
    key_path: str | None = None
    emulate_gpus: str | None = None
    docker_host: str | None = None
    work_dir: str | None = None
    cache_dir: str | None = None
    cache_size: str | None = None


def add_node(store: Store, name: str, host: str, **settings: Any) -> NodeView:
    """Record a new node with the host key fingerprint the operator confirmed.

    ``settings`` are the other fields of :class:`NodeSpec`, by name.
    """
    return add_nodes(store, [NodeSpec(name, host, **settings)])[0]


def add_nodes(store: Store, specs: list[NodeSpec]) -> list[NodeView]:
    """Record new nodes (``gctl node add``, one or an inventory's): all of them, or none.

    Every node is checked before any is written; a name given twice, or
    already recorded, refuses the lot.
    """
    access.operator_only(store, "gctl node add")
    rows = [checked_row(spec) for spec in specs]
    names = Counter(r.name for r in rows)
    twice = sorted(n for n, count in names.items() if count > 1)
    if twice:
        raise ServiceError(f"node {twice[0]!r} is given more than once")
    with transaction(store.engine, write=True) as s:
        known = set(s.scalars(select(NodeRow.name).where(NodeRow.name.in_(sorted(names)))))
        if known:
            raise ServiceError(f"node {sorted(known)[0]!r} already exists")
        s.add_all(rows)
        s.flush()
        for row, spec in zip(rows, specs, strict=True):
            what = f" with emulated GPUs {spec.emulate_gpus}" if row.gpus else ""
            message = f"node {row.name} added ({row.host}:{row.port}){what}"
            events.record(s, "node.add", message, node=row.name)
        return views(s, rows, detail=True)


def checked_row(spec: NodeSpec) -> NodeRow:
    """A checked node row for ``spec`` (not yet in any session); ServiceError when it is bad."""
    name = spec.name
    check_name(name)
    check_fingerprint(spec.host_key_fingerprint)
    for value, flag, limit in (
        (spec.ssh_user, "--user", NAME_MAX),
        (spec.key_path, "--key", TEXT_MAX),
        (spec.docker_host, "--docker-host", NAME_MAX),
        (spec.work_dir, "--work-dir", TEXT_MAX),
        (spec.emulate_gpus, "--emulate-gpus", TEXT_MAX),
    ):
        if value is not None:
            check_text(value, flag, limit=limit)
    if spec.work_dir is not None and not spec.work_dir.startswith("/"):
        raise ServiceError(f"--work-dir {shown(spec.work_dir)}: give an absolute path on the host")
    cache_dir, cache_mb = _cache(spec.cache_dir, spec.cache_size)
    check_host(spec.host)
    check_int(spec.port, "--port", high=65535)
    gpus = parse_emulated(spec.emulate_gpus) if spec.emulate_gpus else []
    for gpu in gpus:  # stable ids for labels and job env, plainly not NVIDIA's
        gpu.uuid = f"GPU-emulated-{name}-{gpu.index}"
    return NodeRow(
        name=name,
        host=spec.host,
        port=spec.port,
        ssh_user=spec.ssh_user,
        key_path=spec.key_path,
        host_key_fingerprint=spec.host_key_fingerprint,
        docker_host=spec.docker_host,
        work_dir=spec.work_dir,
        cache_dir=cache_dir,
        cache_size_mb=cache_mb,
        emulated=bool(gpus),
        gpus=gpus,
    )


CACHE_SIZE_MAX_MB = 1 << 30
"""The largest dataset cache a node may be given (1 PiB)."""


def _cache(cache_dir: str | None, cache_size: str | None) -> tuple[str | None, int | None]:
    """Checked ``--cache-dir`` and ``--cache-size`` (in MiB)."""
    if cache_dir is not None:
        check_text(cache_dir, "--cache-dir", limit=TEXT_MAX)
        if not cache_dir.startswith("/") or cache_dir.rstrip("/") == "":
            raise ServiceError(f"--cache-dir {shown(cache_dir)}: give an absolute path on the host")
    try:
        size = (
            None
            if cache_size is None
            else parse_size_mb(cache_size, "--cache-size", CACHE_SIZE_MAX_MB)
        )
    except SpecError as exc:
        raise ServiceError(str(exc)) from None
    return cache_dir, size


def set_cache(store: Store, name: str, cache_dir: str | None, cache_size: str | None) -> NodeView:
    """Change where the node caches datasets and how much it may hold (None: unchanged)."""
    access.operator_only(store, "gctl node set")
    cache_dir, cache_mb = _cache(cache_dir, cache_size)
    with transaction(store.engine, write=True) as s:
        row = _get(s, name)
        if cache_dir is not None:
            row.cache_dir = cache_dir.rstrip("/")
        if cache_mb is not None:
            row.cache_size_mb = cache_mb
        what = f"cache {row.cache_dir or 'default'}, {row.cache_size_mb or 'unlimited'} MiB"
        events.record(s, "node.set", f"node {name}: {what}", node=name)
        return views(s, [row], detail=True)[0]


def check_host(host: str) -> str:
    """An IP address, or a host name (or ``~/.ssh/config`` alias) that the resolver can take.

    A name needs labels of letters, digits, ``-`` and ``_`` (non-ASCII ones
    as IDNA encodes them) between single dots, and cannot end in a number.
    The resolver raises UnicodeError for ``gpu01..example.com``; such a node
    could never be reached, so it is never recorded.
    """
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    bad = ServiceError(
        f"--host {shown(host)}: not an IP address or a host name"
        " (letters, digits, '-' and '_' between single dots)"
    )
    if len(host) > NAME_MAX:
        raise bad
    try:
        name = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise bad from None
    labels = name.removesuffix(".").split(".")
    if len(name) > 253 or labels[-1].isdigit():
        raise bad
    if not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise bad
    return host


def check_fingerprint(text: str) -> str:
    """An OpenSSH ``SHA256:`` host key fingerprint, as ``ssh-keygen -lf`` prints it."""
    if not _FINGERPRINT.fullmatch(text):
        raise ServiceError(
            f"--host-key-fingerprint {shown(text)}: expected SHA256:<43 base64 characters>,"
            " as 'ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub' prints on the host"
        )
    return text


def scan_host_key(
    name: str,
    host: str,
    *,
    port: int = DEFAULT_SSH_PORT,
    ssh_user: str | None = None,
    key_path: str | None = None,
) -> HostKey:
    """The SSH host key a host presents, to show the operator before it is trusted."""
    # Imported here: paramiko costs every other command 0.15 s of start-up.
    from gctl.hosts.ssh import Target

    check_name(name)
    check_host(host)
    return _scan(Target(node=name, host=host, port=port, user=ssh_user, key_path=key_path))


def scan_node_key(store: Store, name: str) -> HostKey:
    """The SSH host key a stored node's host presents now, reached as gctl always reaches it.

    For operators only: it is what ``gctl node rekey`` shows before it asks.
    """
    from gctl.services.hostops import target  # hostops loads the Docker stack

    access.operator_only(store, "gctl node rekey")
    with transaction(store.engine, write=False) as s:
        reach = target(_get(s, name))
    return _scan(reach)


def _scan(target: Target) -> HostKey:
    """The key ``target`` presents, without checking it or logging in."""
    from gctl.hosts.ssh import HostError, Pool

    with Pool() as pool:
        try:
            return pool.host_key(target)
        except HostError as exc:
            raise ServiceError(str(exc)) from None


def rekey_node(store: Store, name: str, fingerprint: str) -> str | None:
    """Accept a node's changed SSH host key: store its fingerprint, with an event saying who.

    For operators only, as the other node commands. Allowed while the node
    runs jobs: only how gctl checks the host changes. Returns the
    fingerprint it replaces; when that is the same, nothing is stored or
    recorded.
    """
    user = access.operator_only(store, "gctl node rekey").name
    check_fingerprint(fingerprint)
    with transaction(store.engine, write=True) as s:
        row = _get(s, name)
        old = row.host_key_fingerprint
        if old != fingerprint:
            row.host_key_fingerprint = fingerprint
            events.record(
                s,
                "node.rekey",
                f"node {name} host key changed: {old or '(none)'} -> {fingerprint}",
                node=name,
                user=user,
                data={"old": old, "new": fingerprint},
            )
        return old


NODE_STATES = {
    "idle": "idle",
    "mix": "mix",
    "mixed": "mix",
    "alloc": "alloc",
    "allocated": "alloc",
    "drng": "drng",
    "draining": "drng",
    "drain": "drain",
    "drained": "drain",
    "down": "down",
}
"""Node states ``-t`` takes, in gctl's and in sinfo's long spellings."""


def parse_node_states(text: str) -> set[str]:
    """``node ls -t``: a comma list of node states, any case; ServiceError for an unknown one."""
    out = set()
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        if part not in NODE_STATES:
            known = ", ".join(sorted(set(NODE_STATES.values())))
            raise ServiceError(f"-t {shown(part)}: unknown node state (known: {known})")
        out.add(NODE_STATES[part])
    return out


def list_nodes(
    store: Store, names: list[str] | None = None, *, detail: bool = False
) -> list[NodeView]:
    """Every node (or the named ones), by name; with their GPUs when ``detail``."""
    with transaction(store.engine, write=False) as s:
        return views(s, named_rows(s, names), detail=detail)


def named_rows(s: Session, names: list[str] | None) -> list[NodeRow]:
    """The named nodes (default: all) by name, GPUs loaded; NotFound for a name not stored."""
    q = select(NodeRow).options(selectinload(NodeRow.gpus)).order_by(NodeRow.name)
    wanted = check_names(names) if names else None
    if wanted:
        q = q.where(NodeRow.name.in_(wanted))
    rows = list(s.scalars(q))
    _check_all_found(wanted, [r.name for r in rows])
    return rows


def show_node(store: Store, name: str) -> NodeView:
    """One node with its GPUs and the jobs on them."""
    with transaction(store.engine, write=False) as s:
        row = _get(s, name)
        return views(s, [row], detail=True)[0]


def mark(row: NodeRow, admin_state: str, reason: str | None, user: str, at: float) -> None:
    """Put a node in ``admin_state``; the reason, who and when are kept unless it is up."""
    row.admin_state = admin_state
    if admin_state == "up":
        row.reason = row.reason_user = row.reason_time = None
    else:
        row.reason, row.reason_user, row.reason_time = reason, user, at


def set_admin_state(store: Store, name: str, action: str, reason: str | None) -> NodeView:
    """``drain``, ``undrain``, ``down`` or ``resume`` a node, recording reason, user and time."""
    return set_admin_states(store, name, action, reason)[0]


def set_admin_states(store: Store, names: str, action: str, reason: str | None) -> list[NodeView]:
    """:func:`set_admin_state` for every node of a hostlist (``gpu[01-04]``), or for none.

    One transaction: an unknown node, or one that ``undrain`` does not
    apply to, leaves every node as it was.
    """
    if action not in _ADMIN:
        raise ServiceError(f"unknown node action {action!r}")
    user = access.operator_only(store, f"gctl node {action}").name
    if action in ("drain", "down") and not (reason and reason.strip()):
        raise ServiceError(f"--reason: give a reason to {action} a node")
    if reason is not None:
        check_text(reason, "--reason", limit=TEXT_MAX)
    with transaction(store.engine, write=True) as s:
        rows = named_rows(s, [names])
        at, why = now(), f": {reason}" if reason else ""
        for row in rows:
            if action == "undrain" and row.admin_state != "drain":
                raise ServiceError(f"node {row.name} is not drained (it is {row.admin_state})")
            mark(row, _ADMIN[action], reason, user, at)
            message = f"node {row.name} {action}{why}"
            events.record(s, f"node.{action}", message, node=row.name, user=user)
        return views(s, rows, detail=True)


def remove_node(store: Store, name: str) -> None:
    """Forget a node; refused while jobs hold its GPUs."""
    access.operator_only(store, "gctl node rm")
    with transaction(store.engine, write=True) as s:
        row = _get(s, name)
        busy = s.scalar(
            select(func.count())
            .select_from(AllocationRow)
            .join(GpuRow, AllocationRow.gpu_id == GpuRow.id)
            .where(GpuRow.node_id == row.id)
        )
        if busy:
            raise ServiceError(f"node {name} still runs jobs; drain it and wait, then remove it")
        s.delete(row)
        events.record(s, "node.rm", f"node {name} removed", node=name)


def _get(s: Session, name: str) -> NodeRow:
    check_text(name, "node name")
    row = s.scalar(select(NodeRow).options(selectinload(NodeRow.gpus)).where(NodeRow.name == name))
    if row is None:
        raise NotFound(f"unknown node {shown(name)}")
    return row


def check_names(names: list[str]) -> list[str]:
    """Names to look nodes up by, hostlist expressions expanded (``gpu[01-08]``)."""
    check_int(len(names), "number of node names", high=SPEC_ITEMS_MAX)
    for name in names:
        check_text(name, "node name", limit=TEXT_MAX)
    return hostlists.expand(names)


def _check_all_found(asked: list[str] | None, found: list[str]) -> None:
    missing = sorted(set(asked or ()) - set(found))
    if missing:
        raise NotFound(f"unknown node {shown(missing[0])}")


def answering(last_seen: float | None, last_error: str | None, at: float) -> bool:
    """Whether a node counts as responding at ``at``: no error, and seen within the timeout.

    A node that is not is shown with Slurm's ``*`` (:attr:`NodeView.state_flag`).
    """
    return last_error is None and last_seen is not None and at - last_seen <= HEARTBEAT_TIMEOUT


def views(s: Session, rows: list[NodeRow], *, detail: bool) -> list[NodeView]:
    """Views of node rows, with occupancy from the allocations."""
    ids = [r.id for r in rows]
    allocs = s.execute(
        select(GpuRow.node_id, GpuRow.index, AllocationRow.job_id, JobRow.gpus, AllocationRow.since)
        .join(AllocationRow, AllocationRow.gpu_id == GpuRow.id)
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(GpuRow.node_id.in_(ids))
        .order_by(AllocationRow.since, AllocationRow.id)
    ).all()
    on_gpu: dict[tuple[int, int], list[int]] = {}
    first_job: dict[int, int] = {}
    load: Counter[int] = Counter()
    for node_id, index, job_id, job_gpus, _ in allocs:
        on_gpu.setdefault((node_id, index), []).append(job_id)
        first_job.setdefault(node_id, job_gpus)
        load[node_id] += 1
    at = now()
    out = []
    for r in rows:
        total = len(r.gpus)
        used = sum(1 for g in r.gpus if (r.id, g.index) in on_gpu)
        kinds = Counter(f"{g.model}-{g.memory_mb // 1024}GB" for g in r.gpus)
        out.append(
            NodeView(
                name=r.name,
                host=r.host,
                port=r.port,
                ssh_user=r.ssh_user,
                state=_state(r.admin_state, used, total),
                responding=answering(r.last_seen, r.last_error, at),
                gpus_total=total,
                gpus_used=used,
                height=load[r.id] / total if total else 0.0,
                affinity=min(first_job.get(r.id, 0), total),
                gpu_kinds=",".join(f"{n}x{k}" for k, n in sorted(kinds.items())) or "-",
                emulated=r.emulated,
                reason=r.reason,
                reason_user=r.reason_user,
                reason_time=r.reason_time,
                last_seen=r.last_seen,
                last_error=r.last_error,
                host_key_fingerprint=r.host_key_fingerprint,
                docker_host=r.docker_host,
                work_dir=r.work_dir or DEFAULT_WORK_DIR,
                cache_dir=node_cache_dir(r.work_dir, r.cache_dir),
                cache_size_mb=r.cache_size_mb,
                gpus=tuple(
                    GpuView(
                        g.index,
                        g.model,
                        g.memory_mb,
                        g.socket,
                        g.pcie_switch,
                        g.uuid,
                        g.emulated,
                        tuple(on_gpu.get((r.id, g.index), ())),
                    )
                    for g in r.gpus
                )
                if detail
                else (),
            )
        )
    return out


def _state(admin: str, used: int, total: int) -> str:
    if admin == "down":
        return "down"
    if admin == "drain":
        return "drng" if used else "drain"
    if used == 0:
        return "idle"
    return "alloc" if used == total else "mix"
