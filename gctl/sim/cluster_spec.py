"""Build a :class:`~gctl.core.model.Cluster` from a short spec string or a TOML file.

Compact form: ``"NODESxGPUS"`` or ``"NODESxGPUS:TYPE-MEMORY"``, e.g. ``"12x8"``
(12 nodes of 8 V100-16GB GPUs), ``"12x8:V100-16GB"``, ``"4x4:A100-80GB"``.
The type is everything before the last ``-``; a type without a memory size
is an error, since the 16 GB default only fits the default V100. Every node
gets the default PCIe topology described below.

Anything ending in ``.toml`` is read as a file::

    # 4 DGX-1-like nodes and 2 small PCIe boxes
    [[nodes]]
    count = 4                 # optional, default 1
    name_prefix = "dgx"       # optional, default "node"
    gpus = 8                  # required, GPUs per node
    gpu_type = "V100"         # optional, default "V100"
    gpu_memory = "32GB"       # "32GB", "32G", "32768MB", "32768M" or an int of MB;
                              # default 16384, and required when gpu_type is set
    topology = "nvlink"       # optional: "pcie" (default) or "nvlink"

    [[nodes]]
    count = 2
    gpus = 4

The file holds only ``[[nodes]]`` tables, each with only the keys above; any
other key is an error naming it and the file.

Node names are the prefix followed by a 1-based number zero-padded to the
width of the number of nodes with that prefix, at least 2 digits: ``node01``
to ``node12``; numbering continues across tables sharing a prefix. Names must
come out unique.

Topologies (``socket``, ``pcie_switch`` and ``nvlink`` of each
:class:`~gctl.core.model.GPU`):

``pcie``
    GPUs split evenly across 2 CPU sockets (one socket for a 1-GPU node; with
    an odd count the first socket gets the extra GPU); within a socket,
    consecutive GPUs share a PCIe switch two at a time. Switch ids are unique
    within the node and a switch never spans sockets. No NVLink.
``nvlink``
    8 GPUs: the DGX-1 (V100) hybrid cube mesh, each GPU linked to 4 peers by 1
    or 2 links (6 links per GPU), GPUs 0-3 on socket 0 and 4-7 on socket 1,
    switches as for ``pcie``. Other sizes: the ``pcie`` layout plus a single
    NVLink between every pair of GPUs.

Limits, to catch typos before they allocate millions of objects: at most
10,000 nodes in all and 64 GPUs per node.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gctl.core.model import GPU, Cluster, Node

DEFAULT_GPU_TYPE = "V100"
DEFAULT_GPU_MEMORY_MB = 16384
MAX_NODES = 10_000
"""Most nodes a spec may describe in all."""
MAX_GPUS_PER_NODE = 64
"""Most GPUs one node may have."""
TOPOLOGIES = ("pcie", "nvlink")
"""Node layouts a spec can ask for."""

_NODE_KEYS = ("count", "name_prefix", "gpus", "gpu_type", "gpu_memory", "topology")
_COMPACT_RE = re.compile(r"\s*(\d{1,9})\s*[xX]\s*(\d{1,9})\s*(?::\s*(\S(?:.*\S)?)\s*)?", re.ASCII)
_MEMORY_RE = re.compile(r"\s*(\d{1,12})\s*(GB|G|MB|M)?\s*", re.IGNORECASE | re.ASCII)
_PREFIX_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_MAX_MEMORY_MB = 1 << 30
"""1 PB: anything larger is surely a typo."""

_DGX1_LINKS: tuple[tuple[int, int, int], ...] = (
    (0, 1, 1),
    (0, 2, 1),
    (0, 3, 2),
    (0, 4, 2),
    (1, 2, 2),
    (1, 3, 1),
    (1, 5, 2),
    (2, 3, 2),
    (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1),
    (4, 6, 1),
    (4, 7, 2),
    (5, 6, 2),
    (5, 7, 1),
    (6, 7, 2),
)
"""DGX-1V NVLink mesh as ``(gpu, gpu, links)``, as ``nvidia-smi topo -m`` shows it."""


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be built; the message is one line."""


@dataclass(frozen=True, slots=True)
class _Group:
    """One ``[[nodes]]`` table (or the whole compact spec)."""

    count: int
    prefix: str
    gpus: int
    gpu_type: str
    memory_mb: int
    topology: str


def parse_memory(text: str) -> int:
    """Parse a GPU memory size to MB.

    Accepted: ``"16GB"``, ``"16G"``, ``"16384MB"``, ``"16384M"`` or ``"16384"``.
    Units are case-insensitive and binary (1 GB = 1024 MB); a bare number is
    MB. Spaces around the number and unit are allowed. The size must be
    positive.

    Raises:
        ClusterSpecError: The text is not such a size; the message quotes it.

    """
    match = _MEMORY_RE.fullmatch(text)
    if match is None:
        raise ClusterSpecError(
            f"bad GPU memory {text!r}: expected e.g. '16GB', '16G', '16384MB' or '16384'"
        )
    number = int(match.group(1))
    unit = (match.group(2) or "MB").upper()
    mb = number * 1024 if unit in ("GB", "G") else number
    if mb < 1:
        raise ClusterSpecError(f"bad GPU memory {text!r}: must be positive")
    if mb > _MAX_MEMORY_MB:
        raise ClusterSpecError(f"bad GPU memory {text!r}: implausibly large")
    return mb


def _pcie_layout(size: int) -> list[tuple[int, int]]:
    """``(socket, pcie_switch)`` per GPU of the default layout."""
    sockets = 1 if size == 1 else 2
    layout: list[tuple[int, int]] = []
    switch_base = 0
    for socket in range(sockets):
        members = [i for i in range(size) if i * sockets // size == socket]
        for position, _ in enumerate(members):
            layout.append((socket, switch_base + position // 2))
        switch_base += (len(members) + 1) // 2
    return layout


def _nvlink_table(size: int) -> list[list[tuple[int, int]]]:
    """``(peer, links)`` pairs per GPU for the ``nvlink`` topology."""
    peers: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    if size == 8:
        for a, b, links in _DGX1_LINKS:
            peers[a].append((b, links))
            peers[b].append((a, links))
        for row in peers:
            row.sort()
    else:
        for a in range(size):
            peers[a] = [(b, 1) for b in range(size) if b != a]
    return peers


def node_gpus(
    size: int,
    *,
    gpu_type: str = DEFAULT_GPU_TYPE,
    memory_mb: int = DEFAULT_GPU_MEMORY_MB,
    topology: str = "pcie",
) -> tuple[GPU, ...]:
    """Build the GPUs of one node with the given layout (see the module docstring).

    Raises:
        ClusterSpecError: ``size`` is out of range or ``topology`` unknown.

    """
    if not 1 <= size <= MAX_GPUS_PER_NODE:
        raise ClusterSpecError(f"GPUs per node must be 1..{MAX_GPUS_PER_NODE}, got {size}")
    if topology not in TOPOLOGIES:
        raise ClusterSpecError(
            f"unknown topology {topology!r}: expected one of {', '.join(TOPOLOGIES)}"
        )
    layout = _pcie_layout(size)
    links = _nvlink_table(size) if topology == "nvlink" else [[] for _ in range(size)]
    return tuple(
        GPU(
            index=i,
            type=gpu_type,
            memory_mb=memory_mb,
            socket=socket,
            pcie_switch=switch,
            nvlink=tuple(links[i]),
        )
        for i, (socket, switch) in enumerate(layout)
    )


def _build(groups: list[_Group], source: str) -> Cluster:
    """Turn validated groups into a cluster with unique node names."""
    total = sum(g.count for g in groups)
    if total > MAX_NODES:
        raise ClusterSpecError(f"{source}: at most {MAX_NODES} nodes, got {total}")
    per_prefix = Counter[str]()
    for group in groups:
        per_prefix[group.prefix] += group.count
    next_number = Counter[str]()
    nodes: list[Node] = []
    seen: set[str] = set()
    for group in groups:
        gpus = node_gpus(
            group.gpus,
            gpu_type=group.gpu_type,
            memory_mb=group.memory_mb,
            topology=group.topology,
        )
        width = max(2, len(str(per_prefix[group.prefix])))
        for _ in range(group.count):
            next_number[group.prefix] += 1
            name = f"{group.prefix}{next_number[group.prefix]:0{width}d}"
            if name in seen:
                raise ClusterSpecError(f"{source}: node name {name!r} comes out twice")
            seen.add(name)
            nodes.append(Node(name, gpus))
    return Cluster(tuple(nodes))


def _gpu_type(text: str, source: str) -> str:
    """Check a GPU type name."""
    if not text or text != text.strip() or not text.isprintable():
        raise ClusterSpecError(f"{source}: bad GPU type {text!r}")
    return text


def parse_gpu_kind(text: str) -> tuple[str, int]:
    """``TYPE-MEMORY`` (e.g. ``V100-16GB``) as (GPU type, memory in MB)."""
    name, dash, memory = text.rpartition("-")
    if not dash or not name:
        raise ClusterSpecError(f"GPU {text!r} needs TYPE-MEMORY, e.g. 'V100-16GB'")
    return _gpu_type(name, f"GPU {text!r}"), parse_memory(memory)


def _parse_compact(spec: str) -> Cluster:
    """Parse ``NODESxGPUS[:TYPE-MEMORY]``."""
    match = _COMPACT_RE.fullmatch(spec)
    if match is None:
        raise ClusterSpecError(
            f"bad cluster spec {spec!r}: expected NODESxGPUS[:TYPE-MEMORY]"
            " (e.g. '12x8' or '4x4:A100-80GB') or a .toml file"
        )
    count, gpus, gpu = int(match.group(1)), int(match.group(2)), match.group(3)
    if count < 1:
        raise ClusterSpecError(f"bad cluster spec {spec!r}: zero nodes")
    if count > MAX_NODES:
        raise ClusterSpecError(f"bad cluster spec {spec!r}: at most {MAX_NODES} nodes")
    if not 1 <= gpus <= MAX_GPUS_PER_NODE:
        raise ClusterSpecError(
            f"bad cluster spec {spec!r}: GPUs per node must be 1..{MAX_GPUS_PER_NODE}"
        )
    gpu_type, memory_mb = DEFAULT_GPU_TYPE, DEFAULT_GPU_MEMORY_MB
    if gpu is not None:
        try:
            gpu_type, memory_mb = parse_gpu_kind(gpu)
        except ClusterSpecError as exc:
            raise ClusterSpecError(f"bad cluster spec {spec!r}: {exc}") from None
    return _build([_Group(count, "node", gpus, gpu_type, memory_mb, "pcie")], repr(spec))


def _int_field(table: dict[str, Any], key: str, default: int | None, where: str) -> int:
    """Read a positive integer from a node table."""
    value = table.get(key, default)
    if value is None:
        raise ClusterSpecError(f"{where}: missing required key {key!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClusterSpecError(f"{where}: {key} must be an integer, got {value!r}")
    if value < 1:
        what = "zero nodes" if key == "count" else "zero GPUs"
        raise ClusterSpecError(f"{where}: {key} must be >= 1 ({what}), got {value}")
    return value


def _str_field(table: dict[str, Any], key: str, default: str, where: str) -> str:
    """Read a string from a node table."""
    value = table.get(key, default)
    if not isinstance(value, str):
        raise ClusterSpecError(f"{where}: {key} must be a string, got {value!r}")
    return value


def _parse_group(table: Any, where: str) -> _Group:
    """Validate one ``[[nodes]]`` table."""
    if not isinstance(table, dict):
        raise ClusterSpecError(f"{where}: expected a table, got {table!r}")
    for key in table:
        if key not in _NODE_KEYS:
            raise ClusterSpecError(
                f"{where}: unknown key {key!r} (expected one of {', '.join(_NODE_KEYS)})"
            )
    count = _int_field(table, "count", 1, where)
    gpus = _int_field(table, "gpus", None, where)
    if gpus > MAX_GPUS_PER_NODE:
        raise ClusterSpecError(f"{where}: gpus must be at most {MAX_GPUS_PER_NODE}, got {gpus}")
    prefix = _str_field(table, "name_prefix", "node", where)
    if _PREFIX_RE.fullmatch(prefix) is None:
        raise ClusterSpecError(
            f"{where}: bad name_prefix {prefix!r}: use a letter then letters, digits, '_.-'"
        )
    gpu_type = _gpu_type(_str_field(table, "gpu_type", DEFAULT_GPU_TYPE, where), where)
    memory = table.get("gpu_memory")
    if memory is None:
        if "gpu_type" in table:
            raise ClusterSpecError(f"{where}: gpu_type is set, so gpu_memory is required too")
        memory_mb = DEFAULT_GPU_MEMORY_MB
    elif isinstance(memory, str):
        try:
            memory_mb = parse_memory(memory)
        except ClusterSpecError as exc:
            raise ClusterSpecError(f"{where}: {exc}") from None
    elif isinstance(memory, int) and not isinstance(memory, bool):
        if not 1 <= memory <= _MAX_MEMORY_MB:
            raise ClusterSpecError(f"{where}: bad GPU memory {memory!r} MB")
        memory_mb = memory
    else:
        raise ClusterSpecError(
            f"{where}: gpu_memory must be a size like '16GB' or an integer of MB, got {memory!r}"
        )
    topology = _str_field(table, "topology", "pcie", where)
    if topology not in TOPOLOGIES:
        raise ClusterSpecError(
            f"{where}: unknown topology {topology!r} (expected one of {', '.join(TOPOLOGIES)})"
        )
    return _Group(count, prefix, gpus, gpu_type, memory_mb, topology)


def _parse_toml(path: Path) -> Cluster:
    """Parse a TOML cluster file (format in the module docstring)."""
    source = str(path)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ClusterSpecError(f"{source}: cluster file not found") from None
    except OSError as exc:
        raise ClusterSpecError(f"{source}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ClusterSpecError(f"{source}: not valid UTF-8 text") from None
    except RecursionError:
        raise ClusterSpecError(f"{source}: nested too deeply to be a cluster file") from None
    except ValueError as exc:  # TOMLDecodeError, or an integer too long to convert
        raise ClusterSpecError(f"{source}: invalid TOML: {exc}") from None
    for key in data:
        if key != "nodes":
            raise ClusterSpecError(f"{source}: unknown top-level key {key!r} (expected 'nodes')")
    tables = data.get("nodes")
    if not isinstance(tables, list):
        if tables is None:
            raise ClusterSpecError(f"{source}: no [[nodes]] tables (zero nodes)")
        raise ClusterSpecError(f"{source}: 'nodes' must be an array of [[nodes]] tables")
    if not tables:
        raise ClusterSpecError(f"{source}: no [[nodes]] tables (zero nodes)")
    groups = [
        _parse_group(table, f"{source}: [[nodes]] #{number}")
        for number, table in enumerate(tables, 1)
    ]
    return _build(groups, source)


def parse_cluster(spec: str) -> Cluster:
    """Build a cluster from ``"NODESxGPUS[:TYPE-MEMORY]"`` or a ``.toml`` file path.

    See the module docstring for both formats and the default topology.

    Raises:
        ClusterSpecError: The spec is malformed, describes zero nodes or GPUs,
            or the file cannot be read or has an unknown key.

    """
    if spec.strip().lower().endswith(".toml"):
        return _parse_toml(Path(spec.strip()))
    return _parse_compact(spec)
