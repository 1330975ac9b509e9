"""GPU inventory and telemetry probe: the one piece of gctl that runs on a GPU host.

gctl sends this file's source text over SSH and runs it on the host as
``python3 - inventory`` or ``python3 - telemetry`` (the script on stdin). It
prints one JSON document on stdout and exits 0, also when the host has no GPU
at all (``"source": "none"``). Exit status 2 is a usage error; 1 means the probe
itself crashed, and a JSON document with the ``error`` is still printed.

Hence the rules for this file: Python 3.8+, the standard library only plus
``pynvml`` when the host happens to have it, and nothing from gctl. gctl also
imports it locally, to reuse the parsers (when a host has no ``python3``, gctl
runs ``nvidia-smi`` over SSH itself and calls :func:`inventory` with
``nvml=False``, ``run=`` its SSH runner and ``sys_root=None``) and
:func:`gpu_records`, which turns an inventory into gctl's per-GPU rows.

Sources, best first: NVML through ``pynvml``; ``nvidia-smi``; none.

``inventory``::

    {"source": "nvml" | "nvidia-smi" | "none",
     "driver": "535.104.05" | null,
     "gpus": [{"index": 0, "uuid": "GPU-...", "model": "Tesla V100-SXM2-16GB",
               "memory_mb": 16384, "pci_bus_id": "00000000:06:00.0",
               "numa_node": 0 | null, "cpu_affinity": [0, 1, ...] | null}],
     "links": [[0, 1, "NV1", 1], [0, 5, "SYS", 0], ...],
     "pcie_links": [[0, 1, "PIX"], ...] | null,
     "error": null | "..."}

``links`` has one entry ``[i, j, level, nvlink_count]`` per GPU pair ``i < j``,
in ``nvidia-smi topo -m``'s words: ``NV<n>`` when the pair has ``n`` NVLinks
(directly or through NVSwitches), else the PCIe path: ``PIX`` (one PCIe
switch), ``PXB`` (several switches), ``PHB`` (same host bridge), ``NODE``
(same NUMA node, across host bridges) or ``SYS`` (across NUMA nodes/sockets).
``pcie_links`` gives the PCIe path of every pair even where NVLink hides it;
only NVML knows it, so it is null for ``nvidia-smi`` (and when NVML cannot
tell, as in some VMs: ``links`` then says ``NODE`` for GPUs on one NUMA node,
else ``SYS``, and ``error`` says why). ``numa_node`` (null: unknown) and
``cpu_affinity`` come from ``/sys/bus/pci/devices/<bus id>/`` (NVML's CPU
affinity first), or else from the affinity columns of ``nvidia-smi topo -m``.
``memory_mb`` is MiB; ``model`` the full marketing name.

``telemetry``::

    {"source": ...,
     "gpus": [{"index": 0, "uuid": "GPU-...", "util_percent": 97 | null,
               "memory_used_mb": 15200, "memory_total_mb": 16384}],
     "processes": [{"gpu_uuid": "GPU-...", "pid": 4242, "used_memory_mb": 15000 | null,
                    "container_id": "<64 hex>" | null}],
     "error": null | "..."}

``pid`` is the host's PID; ``container_id`` is the Docker container it runs in,
read from ``/proc/<pid>/cgroup``.

The logic is in pure functions of their inputs (an NVML-like object, command
output, filesystem roots); only :func:`main` and the defaults touch the host.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    Runner = Callable[[list[str]], str]
    """Runs an argv and returns its stdout; raises (FileNotFoundError: no such command)."""

QUERY_GPU_ARGS = (
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.total,pci.bus_id,driver_version",
    "--format=csv,noheader,nounits",
)
"""nvidia-smi command for the GPU list (:func:`parse_query_gpu`)."""
TOPO_ARGS = ("nvidia-smi", "topo", "-m")
"""nvidia-smi command for the link matrix (:func:`parse_topo_matrix`)."""
QUERY_USAGE_ARGS = (
    "nvidia-smi",
    "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
)
"""nvidia-smi command for per-GPU telemetry (:func:`parse_query_usage`)."""
COMPUTE_APPS_ARGS = (
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,used_memory",
    "--format=csv,noheader,nounits",
)
"""nvidia-smi command for the processes on the GPUs (:func:`parse_compute_apps`)."""

NO_GPU_TOOLS = "no NVML and no nvidia-smi"
"""The ``error`` of a host with neither NVML nor nvidia-smi: no GPUs, not a failure."""
PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
"""PCIe path levels, nearest first (nvidia-smi topo's words)."""

_MIB = 1 << 20
_NVIDIA_VENDOR = "0x10de"
"""PCI vendor id in sysfs: the probe reads NUMA and CPU files of NVIDIA devices only."""
_NVML_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
"""NVML_TOPOLOGY_INTERNAL/SINGLE/MULTIPLE/HOSTBRIDGE/NODE/SYSTEM as topo words."""
_NVLINK_DEVICE_TYPE_IBMNPU = 1
"""NVML_NVLINK_DEVICE_TYPE_IBMNPU: an NVLink to a POWER CPU, not to a GPU or NVSwitch."""
_DEFAULT_NVLINK_MAX_LINKS = 18
_CPU_WORDS = 16
"""64-bit words asked of nvmlDeviceGetCpuAffinity at least (1024 CPUs)."""
_TIMEOUT_S = 60.0
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_LABEL = re.compile(r"GPU(\d+)$")
_NV_CELL = re.compile(r"NV(\d+)$")
_HEADER_TOKEN = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_CPULIST = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
_NOT_AVAILABLE = (
    "",
    "[N/A]",
    "N/A",
    "[Not Supported]",
    "[Unknown Error]",
    "[Insufficient Permissions]",
)
_SHORT_MODEL_SKIP = frozenset({"NVIDIA", "TESLA", "GEFORCE", "QUADRO"})
_SHORT_MODEL_JOIN = frozenset({"RTX", "GTX", "TITAN"})


class MemoryInfo(Protocol):
    """What ``nvmlDeviceGetMemoryInfo`` returns (bytes)."""

    @property
    def total(self) -> int:
        """Memory on the GPU."""

    @property
    def used(self) -> int:
        """Memory allocated on the GPU."""


class PciInfo(Protocol):
    """What ``nvmlDeviceGetPciInfo`` returns."""

    @property
    def busId(self) -> str | bytes:
        """``00000000:06:00.0``; bytes in old pynvml versions."""


class Utilization(Protocol):
    """What ``nvmlDeviceGetUtilizationRates`` returns."""

    @property
    def gpu(self) -> int:
        """Percent of the last sample period a kernel ran."""


class ProcessInfo(Protocol):
    """One entry of ``nvmlDeviceGetComputeRunningProcesses``."""

    @property
    def pid(self) -> int:
        """The host's process id."""

    @property
    def usedGpuMemory(self) -> int | None:
        """Bytes of GPU memory, None when NVML cannot tell."""


class NvmlApi(Protocol):
    """The part of pynvml's API this probe uses (pynvml itself has no type hints).

    Every call may raise ``NVMLError`` (the base class of pynvml's errors);
    device handles are opaque.
    """

    @property
    def NVMLError(self) -> type[Exception]:
        """The base class of every NVML error."""

    def nvmlInit(self) -> None:
        """Load and initialise NVML."""

    def nvmlShutdown(self) -> None:
        """Release NVML."""

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        """The driver version, e.g. ``535.104.05``."""

    def nvmlDeviceGetCount(self) -> int:
        """Number of GPUs."""

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        """The handle of GPU ``index`` (nvidia-smi's numbering)."""

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:
        """``GPU-...``."""

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        """The model name, e.g. ``Tesla V100-SXM2-16GB``."""

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> MemoryInfo:
        """Memory in bytes."""

    def nvmlDeviceGetPciInfo(self, handle: Any) -> PciInfo:
        """PCI address."""

    def nvmlDeviceGetCpuAffinity(self, handle: Any, cpuSetSize: int) -> Sequence[int]:
        """Bitmask of the CPUs near the GPU in ``cpuSetSize`` 64-bit words."""

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        """The nearest common PCIe ancestor of two GPUs, an ``NVML_TOPOLOGY_*`` level."""

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        """Whether NVLink ``link`` of the GPU is active (NVMLError: no such link)."""

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> PciInfo:
        """PCI address of what is at the far end of NVLink ``link``."""

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        """``NVML_NVLINK_DEVICE_TYPE_*`` of the far end (optional: newer pynvml only)."""

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Utilization:
        """Recent GPU utilisation."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Sequence[ProcessInfo]:
        """Compute processes on the GPU."""

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> Sequence[ProcessInfo]:
        """Graphics processes on the GPU."""


class CommandFailed(RuntimeError):
    """A command ran but exited non-zero; the message is its first line of output."""


# --- small helpers -----------------------------------------------------------


def _text(value: object) -> str:
    """A string from NVML, which old pynvml versions return as bytes."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _int_or_none(text: str) -> int | None:
    """An integer CSV field, None for ``[N/A]`` and the like."""
    text = text.strip()
    if text in _NOT_AVAILABLE:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def sysfs_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` as sysfs spells it: ``0000:3b:00.0``."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if not sep or not rest.count(":"):
        return bus_id
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return bus_id


def parse_cpulist(text: str) -> list[int] | None:
    """``0-19,40-59`` as a CPU id list; ``[]`` for an empty list, None when not a list."""
    text = text.strip()
    if not text:
        return []
    if _CPULIST.fullmatch(text) is None:
        return None
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus: Iterable[int]) -> str:
    """A CPU id list in the kernel's compact form: ``[0, 1, 2, 5]`` -> ``0-2,5``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        lo, hi = ordered[start], ordered[end]
        parts.append(str(lo) if lo == hi else f"{lo}-{hi}")
        start = end + 1
    return ",".join(parts)


def _mask_cpus(words: Sequence[int]) -> list[int]:
    """CPU ids set in a bitmask given as 64-bit words, lowest word first."""
    return [
        64 * w + bit for w, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1
    ]


def _read(path: str) -> str | None:
    """A small file's text, None when missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _sys_device(sys_root: str, bus_id: str, name: str) -> str | None:
    """A sysfs attribute of the PCI device, if that device is an NVIDIA one."""
    where = os.path.join(sys_root, "bus", "pci", "devices", sysfs_bus_id(bus_id))
    vendor = _read(os.path.join(where, "vendor"))
    if vendor is None or vendor.strip().lower() != _NVIDIA_VENDOR:
        return None
    return _read(os.path.join(where, name))


def _sys_numa_node(sys_root: str | None, bus_id: str) -> int | None:
    """The GPU's NUMA node from sysfs; None when unknown (the kernel says -1)."""
    text = None if sys_root is None else _sys_device(sys_root, bus_id, "numa_node")
    node = None if text is None else _int_or_none(text)
    return node if node is not None and node >= 0 else None


def _sys_cpus(sys_root: str | None, bus_id: str) -> list[int] | None:
    """The CPUs local to the GPU from sysfs ``local_cpulist``; None when unknown or empty."""
    text = None if sys_root is None else _sys_device(sys_root, bus_id, "local_cpulist")
    return (parse_cpulist(text) or None) if text is not None else None


def _csv_rows(text: str, fields: int) -> list[list[str]]:
    """Rows of ``--format=csv,noheader,nounits`` output with at least ``fields`` cells."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= fields and cells[0]:
            rows.append(cells)
    return rows


def _pair(i: int, j: int) -> tuple[int, int]:
    return (i, j) if i < j else (j, i)


def _link_word(pcie: str, nvlinks: int) -> str:
    return f"NV{nvlinks}" if nvlinks > 0 else pcie


# --- nvidia-smi output parsers -----------------------------------------------


def _gpu_rows(
    text: str, columns: Sequence[str], numbers: Sequence[str]
) -> list[tuple[dict[str, Any], list[str]]]:
    """CSV rows that start with a GPU index, by index, as (dict, the cells past ``columns``).

    The dict is keyed ``index`` and ``columns``; columns named in ``numbers``
    become ints (None for ``[N/A]``). Lines that are not GPU rows are skipped.
    """
    rows = []
    for cells in _csv_rows(text, len(columns) + 1):
        index = _int_or_none(cells[0])
        if index is None:
            continue
        row: dict[str, Any] = {"index": index}
        for k, name in enumerate(columns, 1):
            row[name] = _int_or_none(cells[k]) if name in numbers else cells[k]
        rows.append((row, cells[len(columns) + 1 :]))
    return sorted(rows, key=lambda r: int(r[0]["index"]))


def parse_query_gpu(text: str) -> list[dict[str, Any]]:
    """Parse :data:`QUERY_GPU_ARGS` output: one dict per GPU, by index.

    Each dict has ``index``, ``uuid``, ``model``, ``memory_mb``, ``pci_bus_id``
    and ``driver`` (None when the ``driver_version`` column is absent, as in
    the same query without it). Lines that are not GPU rows are skipped.
    """
    gpus = []
    for row, extra in _gpu_rows(text, ("uuid", "model", "memory_mb", "pci_bus_id"), ("memory_mb",)):
        row["driver"] = extra[0] if extra and extra[0] not in _NOT_AVAILABLE else None
        gpus.append(row)
    return gpus


def parse_query_usage(text: str) -> list[dict[str, Any]]:
    """Parse :data:`QUERY_USAGE_ARGS` output into telemetry GPU dicts, by index."""
    numbers = ("util_percent", "memory_used_mb", "memory_total_mb")
    return [row for row, _ in _gpu_rows(text, ("uuid", *numbers), numbers)]


def parse_compute_apps(text: str) -> list[dict[str, Any]]:
    """Parse :data:`COMPUTE_APPS_ARGS` output: ``gpu_uuid``, ``pid``, ``used_memory_mb``.

    ``used_memory_mb`` is None where nvidia-smi says ``[N/A]`` (no permission,
    MIG, some containers). Empty output means no processes.
    """
    apps = []
    for cells in _csv_rows(text, 3):
        pid = _int_or_none(cells[1])
        if pid is None or not cells[0].startswith(("GPU-", "MIG-")):
            continue
        apps.append({"gpu_uuid": cells[0], "pid": pid, "used_memory_mb": _int_or_none(cells[2])})
    return apps


def _split_row(line: str) -> list[str]:
    """A matrix row's cells: tab-separated in real output, spaces in copies of it."""
    cells = line.split("\t") if "\t" in line else line.split()
    return [c.strip() for c in cells if c.strip()]


def parse_topo_matrix(text: str) -> dict[str, Any]:
    """Parse ``nvidia-smi topo -m`` output.

    Returns ``{"count": n, "links": [[i, j, level, nvlink_count], ...],
    "numa_node": [int | None per GPU], "cpu_affinity": [list | None per GPU]}``
    with a link for every GPU pair ``i < j`` the matrix gives (row ``i``,
    column ``j``). NIC rows and columns, the legend and ANSI underlining are
    ignored; ``SOC`` (old drivers) reads as ``SYS``.

    Raises:
        ValueError: No GPU header row (e.g. an error message instead of a matrix).

    """
    header: list[str] | None = None
    rows: dict[int, list[str]] = {}
    for raw in _ANSI.sub("", text).splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if line.lstrip().startswith(("Legend", "NIC Legend")):
            break
        if header is None:
            tokens = _HEADER_TOKEN.findall(line)
            if tokens and _GPU_LABEL.match(tokens[0]) and "X" not in tokens:
                header = tokens  # the column names; every row has an X cell
            continue
        cells = _split_row(line)
        label = _GPU_LABEL.match(cells[0]) if cells else None
        if label is not None:
            rows[int(label.group(1))] = cells[1:]
    if header is None:
        raise ValueError("no GPU matrix in nvidia-smi topo output")
    columns = [h for h in header if h not in _AFFINITY_COLUMNS]
    extras = [h for h in header if h in _AFFINITY_COLUMNS]
    gpu_columns = {}
    for position, name in enumerate(columns):
        m = _GPU_LABEL.match(name)
        if m is not None:
            gpu_columns[int(m.group(1))] = position
    count = max(list(rows) + list(gpu_columns), default=-1) + 1
    links = []
    for i in range(count):
        cells = rows.get(i, [])
        for j in range(i + 1, count):
            column = gpu_columns.get(j)
            if column is None or column >= len(cells):
                continue
            cell = cells[column].upper()
            nv = _NV_CELL.match(cell)
            if nv is not None:
                links.append([i, j, f"NV{int(nv.group(1))}", int(nv.group(1))])
            elif cell in PCIE_LEVELS or cell == "SOC":
                links.append([i, j, "SYS" if cell == "SOC" else cell, 0])
    numa: list[int | None] = [None] * count
    cpus: list[list[int] | None] = [None] * count
    for i, cells in rows.items():
        tail = cells[len(columns) :]
        values = {name: tail[k] for k, name in enumerate(extras) if k < len(tail)}
        cpus[i] = parse_cpulist(values.get("CPU Affinity", "N/A"))
        node = _int_or_none(values.get("NUMA Affinity", ""))
        numa[i] = node if node is not None and node >= 0 else None
    return {"count": count, "links": links, "numa_node": numa, "cpu_affinity": cpus}


# --- /proc -------------------------------------------------------------------


def container_of(pid: int, proc_root: str = "/proc") -> str | None:
    """The Docker container id (64 hex) a host process runs in, from its cgroup file.

    Understands cgroup v2 (``0::/system.slice/docker-<id>.scope``), v1
    (``12:memory:/docker/<id>``), a ``--cgroup-parent`` (``.../gctl-h1/<id>``)
    and Kubernetes paths; the innermost id wins. None when the process is in
    no container, has gone, or its cgroup file cannot be read.
    """
    text = _read(os.path.join(proc_root, str(int(pid)), "cgroup"))
    if text is None:
        return None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        found = _CONTAINER_ID.findall(path)
        if found:
            return str(found[-1])
    return None


# --- commands ------------------------------------------------------------------


def run_command(argv: list[str]) -> str:
    """Run a command on this host and return its stdout (the default ``run``).

    Raises:
        FileNotFoundError: No such command.
        CommandFailed: It exited non-zero or timed out.

    """
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"{argv[0]} timed out after {_TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        first = f": {said[0].strip()}" if said else ""
        raise CommandFailed(f"{argv[0]} exited {done.returncode}{first}")
    return str(done.stdout)


def _load_pynvml() -> NvmlApi | None:
    """The host's pynvml module, None when it has none."""
    try:
        return cast("NvmlApi", importlib.import_module("pynvml"))
    except Exception:  # ImportError, or a pynvml too broken to import
        return None


def _open_nvml(nvml: NvmlApi | bool | None) -> NvmlApi | None:
    """The NVML to use, initialised; None when there is none (or ``nvml=False``)."""
    if nvml is False or nvml is True:
        api = None if nvml is False else _load_pynvml()
    else:
        api = _load_pynvml() if nvml is None else nvml
    if api is None:
        return None
    try:
        api.nvmlInit()
    except api.NVMLError:
        return None
    return api


def _errors(nvml: NvmlApi) -> tuple[type[Exception], ...]:
    """Exceptions a pynvml call may raise for a GPU that cannot answer."""
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    if isinstance(mismatch, type) and issubclass(mismatch, Exception):
        return (nvml.NVMLError, mismatch)
    return (nvml.NVMLError,)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# --- inventory -----------------------------------------------------------------


def _none_inventory(error: str | None) -> dict[str, Any]:
    return {
        "source": "none",
        "driver": None,
        "gpus": [],
        "links": [],
        "pcie_links": None,
        "error": error,
    }


def _nvml_inventory(nvml: NvmlApi, sys_root: str | None) -> dict[str, Any]:
    """Inventory through an initialised NVML; raises NVML errors of the basics."""
    errors = _errors(nvml)
    problems: list[str] = []
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))]
    words = max(_CPU_WORDS, ((os.cpu_count() or 1) + 63) // 64)
    gpus = []
    for index, handle in enumerate(handles):
        bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        try:
            cpus: list[int] | None = _mask_cpus(nvml.nvmlDeviceGetCpuAffinity(handle, words))
        except errors:
            cpus = None
        gpus.append(
            {
                "index": index,
                "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                "model": _text(nvml.nvmlDeviceGetName(handle)),
                "memory_mb": int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
                "pci_bus_id": bus_id,
                "numa_node": _sys_numa_node(sys_root, bus_id),
                "cpu_affinity": cpus or _sys_cpus(sys_root, bus_id),
            }
        )
    pcie: dict[tuple[int, int], str | None] = {}
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            try:
                ancestor = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                pcie[i, j] = _NVML_LEVELS.get(int(ancestor), "SYS")
            except errors as exc:
                pcie[i, j] = None
                if not problems:
                    problems.append(f"PCIe topology: {_describe(exc)}")
    direct, switch_links = _nvml_nvlinks(nvml, handles, [str(g["pci_bus_id"]) for g in gpus])
    links = []
    for (i, j), level in sorted(pcie.items()):
        count = max(direct.get((i, j), 0), direct.get((j, i), 0))
        count += min(switch_links[i], switch_links[j])
        if level is None:  # NVML cannot tell (VMs): judge by the NUMA nodes
            same = gpus[i]["numa_node"] is not None and gpus[i]["numa_node"] == gpus[j]["numa_node"]
            level = "NODE" if same else "SYS"
        links.append([i, j, _link_word(level, count), count])
    known = all(level is not None for level in pcie.values())
    return {
        "source": "nvml",
        "driver": _text(nvml.nvmlSystemGetDriverVersion()),
        "gpus": gpus,
        "links": links,
        "pcie_links": [[i, j, level] for (i, j), level in sorted(pcie.items())] if known else None,
        "error": "; ".join(problems) or None,
    }


def _nvml_nvlinks(
    nvml: NvmlApi, handles: list[Any], bus_ids: list[str]
) -> tuple[dict[tuple[int, int], int], list[int]]:
    """Active NVLinks: per ordered GPU pair, and per GPU to NVSwitches.

    A link whose far end is no GPU of this host is taken to go to an NVSwitch
    (DGX A100/H100), over which every GPU reaches every other; links to a
    POWER CPU are not counted.
    """
    errors = _errors(nvml)
    by_bus = {sysfs_bus_id(b): i for i, b in enumerate(bus_ids)}
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", _DEFAULT_NVLINK_MAX_LINKS))
    remote_type = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    direct: dict[tuple[int, int], int] = {}
    switch_links = [0] * len(handles)
    for i, handle in enumerate(handles):
        for link in range(max_links):
            try:
                if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                    continue
                remote = sysfs_bus_id(
                    _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
                )
            except errors:
                continue  # no such link on this GPU, or NVLink not supported at all
            peer = by_bus.get(remote)
            if peer is not None:
                if peer != i:
                    direct[i, peer] = direct.get((i, peer), 0) + 1
                continue
            if remote_type is not None:
                try:
                    if int(remote_type(handle, link)) == _NVLINK_DEVICE_TYPE_IBMNPU:
                        continue
                except errors:
                    pass
            switch_links[i] += 1
    return direct, switch_links


def _smi_inventory(run: Runner, sys_root: str | None) -> dict[str, Any]:
    """Inventory from nvidia-smi; raises what ``run`` raises for the GPU list."""
    rows = parse_query_gpu(run(list(QUERY_GPU_ARGS)))
    driver = next((r["driver"] for r in rows if r["driver"]), None)
    error = None
    topo: dict[str, Any] = {"links": [], "numa_node": [], "cpu_affinity": []}
    if len(rows) > 1:
        try:
            topo = parse_topo_matrix(run(list(TOPO_ARGS)))
        except Exception as exc:  # any runner's failure: report it, keep the GPU list
            error = f"nvidia-smi topo -m: {_describe(exc)}"
    elif rows:
        with contextlib.suppress(Exception):  # a lone GPU has no links; affinity is a nicety
            topo = parse_topo_matrix(run(list(TOPO_ARGS)))
    gpus = []
    for row in rows:
        index = int(row["index"])
        bus_id = str(row["pci_bus_id"])
        numa = _sys_numa_node(sys_root, bus_id)
        cpus = _sys_cpus(sys_root, bus_id)
        if numa is None and index < len(topo["numa_node"]):
            numa = topo["numa_node"][index]
        if cpus is None and index < len(topo["cpu_affinity"]):
            cpus = topo["cpu_affinity"][index]
        gpu = {k: v for k, v in row.items() if k != "driver"}
        gpu.update(numa_node=numa, cpu_affinity=cpus)
        gpus.append(gpu)
    indices = {int(g["index"]) for g in gpus}
    links = [link for link in topo["links"] if link[0] in indices and link[1] in indices]
    return {
        "source": "nvidia-smi",
        "driver": driver,
        "gpus": gpus,
        "links": links,
        "pcie_links": None,
        "error": error,
    }


def inventory(
    nvml: NvmlApi | bool | None = None,
    run: Runner | None = None,
    sys_root: str | None = "/sys",
) -> dict[str, Any]:
    """The host's GPUs and how they are linked (see the module docstring for the shape).

    Args:
        nvml: An object with pynvml's functions; None imports ``pynvml`` when
            the host has it; False skips NVML.
        run: Runs an nvidia-smi argv and returns its stdout, raising
            FileNotFoundError when there is no nvidia-smi (default: run here).
        sys_root: Where sysfs is, for NUMA nodes and local CPUs; None when
            this is not the GPU host (e.g. nvidia-smi run over SSH).

    """
    api = _open_nvml(nvml)
    nvml_error = None
    if api is not None:
        caught: tuple[type[Exception], ...] = (*_errors(api), AttributeError)  # old pynvml
        try:
            return _nvml_inventory(api, sys_root)
        except caught as exc:
            nvml_error = f"NVML: {_describe(exc)}"
        finally:
            _shutdown(api)
    try:
        doc = _smi_inventory(run or run_command, sys_root)
    except FileNotFoundError:
        return _none_inventory(nvml_error or NO_GPU_TOOLS)
    except Exception as exc:  # any runner's failure is the host's answer
        said = f"nvidia-smi: {_describe(exc)}"
        return _none_inventory(f"{nvml_error}; {said}" if nvml_error else said)
    return doc


def _shutdown(nvml: NvmlApi) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


# --- telemetry -----------------------------------------------------------------


def _nvml_telemetry(nvml: NvmlApi) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Per-GPU use and the processes (None when NVML cannot list them)."""
    errors = _errors(nvml)
    gpus = []
    apps: list[dict[str, Any]] | None = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        try:
            util: int | None = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except errors:
            util = None
        gpus.append(
            {
                "index": index,
                "uuid": uuid,
                "util_percent": util,
                "memory_used_mb": int(memory.used) // _MIB,
                "memory_total_mb": int(memory.total) // _MIB,
            }
        )
        if apps is None:
            continue
        try:
            found = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except errors:
            apps = None
            continue
        with contextlib.suppress(*errors):
            found += list(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
        for proc in found:
            used = proc.usedGpuMemory
            apps.append(
                {
                    "gpu_uuid": uuid,
                    "pid": int(proc.pid),
                    "used_memory_mb": None if used is None else int(used) // _MIB,
                }
            )
    return gpus, apps


def _merge_processes(apps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (GPU, pid): a process both computing and drawing is listed twice."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for app in apps:
        key = (str(app["gpu_uuid"]), int(app["pid"]))
        seen = merged.get(key)
        if seen is None:
            merged[key] = dict(app)
        elif app["used_memory_mb"] is not None:
            seen["used_memory_mb"] = max(seen["used_memory_mb"] or 0, app["used_memory_mb"])
    return list(merged.values())


def telemetry(
    nvml: NvmlApi | bool | None = None,
    run: Runner | None = None,
    proc_root: str | None = "/proc",
) -> dict[str, Any]:
    """Use of each GPU and the processes on them, with their containers.

    ``nvml`` and ``run`` are as for :func:`inventory`; ``proc_root`` is where
    the host's procfs is (None: do not map processes to containers).
    """
    run = run or run_command
    api = _open_nvml(nvml)
    source, problems = "none", []
    gpus: list[dict[str, Any]] = []
    apps: list[dict[str, Any]] | None = None
    if api is not None:
        caught: tuple[type[Exception], ...] = (*_errors(api), AttributeError)  # old pynvml
        try:
            gpus, apps = _nvml_telemetry(api)
            source = "nvml"
        except caught as exc:
            problems.append(f"NVML: {_describe(exc)}")
        finally:
            _shutdown(api)
    if source == "none":
        try:
            gpus = parse_query_usage(run(list(QUERY_USAGE_ARGS)))
            source = "nvidia-smi"
        except FileNotFoundError:
            problems = problems or [NO_GPU_TOOLS]
        except Exception as exc:  # any runner's failure is the host's answer
            problems.append(f"nvidia-smi: {_describe(exc)}")
    if source != "none" and apps is None:
        try:
            apps = parse_compute_apps(run(list(COMPUTE_APPS_ARGS)))
        except Exception as exc:  # keep the GPU figures, say why processes are missing
            problems.append(f"processes: {_describe(exc)}")
    processes = _merge_processes(apps or [])
    for proc in processes:
        proc["container_id"] = None if proc_root is None else container_of(proc["pid"], proc_root)
    return {
        "source": source,
        "gpus": gpus,
        "processes": processes,
        "error": "; ".join(problems) or None,
    }


# --- what gctl stores per GPU --------------------------------------------------


def short_model(name: str) -> str:
    """A GPU type from its marketing name: ``Tesla V100-SXM2-16GB`` -> ``V100``.

    ``NVIDIA A100-SXM4-80GB`` -> ``A100``, ``NVIDIA H100 80GB HBM3`` -> ``H100``,
    ``NVIDIA GeForce RTX 3090`` -> ``RTX3090``. A name without a recognisable
    model token is kept whole.
    """
    tokens = [t for t in re.split(r"[\s_-]+", name.strip()) if t]
    words = [t for t in tokens if t.upper() not in _SHORT_MODEL_SKIP]
    if not words:
        return name.strip()
    first = words[0]
    if first.upper() in _SHORT_MODEL_JOIN and len(words) > 1:
        return first.upper() + words[1]
    return first


def gpu_records(inv: dict[str, Any]) -> list[dict[str, Any]]:
    """What gctl stores per GPU of an inventory, by index.

    Each record: ``index``, ``uuid``, ``model`` (short type, e.g. ``V100``),
    ``model_name`` (full name), ``memory_mb``, ``numa_node``, ``cpu_affinity``
    (compact CPU list text such as ``0-19,40-59``, or None), ``socket``,
    ``pcie_switch`` and ``nvlink_peers`` (``[[peer index, links], ...]``).

    ``socket`` is the NUMA node when every GPU's is known and no two GPUs on
    one node are linked ``SYS``; otherwise GPUs are grouped so that no group
    holds a ``SYS`` pair (0 for all when nothing is known). ``pcie_switch``
    numbers the groups of GPUs joined by ``PIX``/``PXB`` paths, so GPUs
    behind one switch share an id and a GPU without such a peer has its own.
    """
    gpus = sorted(inv.get("gpus") or [], key=lambda g: int(g["index"]))
    order = [int(g["index"]) for g in gpus]
    pcie: dict[tuple[int, int], str] = {}
    nvlink: dict[int, dict[int, int]] = {i: {} for i in order}
    for link in inv.get("links") or []:
        i, j, level, count = int(link[0]), int(link[1]), str(link[2]), int(link[3])
        if i not in nvlink or j not in nvlink or i == j:
            continue
        if count > 0:
            nvlink[i][j] = nvlink[j][i] = count
        if not level.startswith("NV"):
            pcie[_pair(i, j)] = level
    for link in inv.get("pcie_links") or []:
        pcie[_pair(int(link[0]), int(link[1]))] = str(link[2])
    sockets = _sockets(gpus, order, pcie)
    switches = _switch_groups(order, pcie, sockets)
    records = []
    for gpu in gpus:
        index = int(gpu["index"])
        cpus = gpu.get("cpu_affinity")
        name = str(gpu.get("model") or "unknown")
        records.append(
            {
                "index": index,
                "uuid": gpu.get("uuid"),
                "model": short_model(name),
                "model_name": name,
                "memory_mb": int(gpu.get("memory_mb") or 0),
                "numa_node": gpu.get("numa_node"),
                "cpu_affinity": None if cpus is None else format_cpulist(cpus),
                "socket": sockets[index],
                "pcie_switch": switches[index],
                "nvlink_peers": [[p, n] for p, n in sorted(nvlink[index].items())],
            }
        )
    return records


def _sockets(
    gpus: list[dict[str, Any]], order: list[int], pcie: dict[tuple[int, int], str]
) -> dict[int, int]:
    """Socket per GPU index: NUMA nodes if they agree with the SYS links, else SYS-free groups."""
    numa = {int(g["index"]): g.get("numa_node") for g in gpus}
    known = {i: n for i, n in numa.items() if isinstance(n, int)}
    crossing = [pair for pair, level in pcie.items() if level == "SYS"]
    if len(known) == len(numa) and not any(known.get(a) == known.get(b) for a, b in crossing):
        return {i: known[i] for i in order}
    groups: list[list[int]] = []
    socket = {}
    for i in order:
        for number, members in enumerate(groups):
            if not any(pcie.get(_pair(i, m)) == "SYS" for m in members):
                members.append(i)
                socket[i] = number
                break
        else:
            socket[i] = len(groups)
            groups.append([i])
    return socket


def _switch_groups(
    order: list[int], pcie: dict[tuple[int, int], str], sockets: dict[int, int]
) -> dict[int, int]:
    """PCIe switch id per GPU index: connected components of PIX/PXB pairs."""
    parent = {i: i for i in order}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for (a, b), level in pcie.items():
        if level in ("PIX", "PXB") and a in parent and b in parent and sockets[a] == sockets[b]:
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    ids: dict[int, int] = {}
    return {i: ids.setdefault(root(i), len(ids)) for i in order}


# --- the script ------------------------------------------------------------------

_USAGE = "usage: python3 - inventory|telemetry  (gctl GPU probe, script on stdin)"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the inventory or telemetry of this host as JSON; the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] not in ("inventory", "telemetry"):
        print(_USAGE, file=sys.stderr)
        return 2
    status = 0
    try:
        doc = inventory() if args[0] == "inventory" else telemetry()
    except Exception as exc:  # still answer in JSON, so gctl can say what went wrong
        crash = f"probe crashed: {type(exc).__name__}: {exc}"
        if args[0] == "inventory":
            doc = _none_inventory(crash)
        else:
            doc = {"source": "none", "gpus": [], "processes": [], "error": crash}
        status = 1
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
