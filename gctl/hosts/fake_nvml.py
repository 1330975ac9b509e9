"""A FAKE NVML for tests and GPU emulation: made-up GPUs, never real figures.

:class:`FakeNVML` stands in for the ``pynvml`` module wherever
:mod:`gctl.hosts.gpu_probe` takes an ``nvml`` object. It implements exactly the
part of pynvml's API the probe uses (:class:`gctl.hosts.gpu_probe.NvmlApi`),
with pynvml's function names and arguments, its constant values
(``NVML_TOPOLOGY_*``, ``NVML_NVLINK_*``, ``NVML_ERROR_*``) and its error
classes: ``NVMLError(code)`` builds the matching subclass such as
``NVMLError_NotSupported``, whose ``value`` is the code, as pynvml 13 does.
Strings come back as ``str`` and ``busId`` as ``"00000000:06:00.0"``, as
recent pynvml returns them.

A fake host is built from a description::

    FakeNVML.from_spec("8xV100-16GB", topology="nvlink")

``topology`` is one of the simulator's layouts (``pcie``, ``nvlink``; see
:func:`gctl.sim.cluster_spec.node_gpus`, which the fake uses, so a probe of
the fake and the simulator see the same sockets, PCIe switches and NVLinks)
or ``nvswitch``: the ``pcie`` layout with every GPU's NVLinks going to
NVSwitches, as on a DGX A100/H100. GPUs on one PCIe switch share a common
ancestor ``NVML_TOPOLOGY_SINGLE``, the same socket ``NVML_TOPOLOGY_NODE``,
different sockets ``NVML_TOPOLOGY_SYSTEM``. Each socket has ``cores`` CPU cores
with ``threads`` threads each, numbered as Linux does (DGX-1: GPUs 0-3 near
CPUs ``0-19,40-59``).

Telemetry is set by hand (:meth:`FakeNVML.set_usage`,
:meth:`FakeNVML.add_process`), failures are injected with
:meth:`FakeNVML.fail`, and :meth:`FakeNVML.write_sysfs` writes the vendor, NUMA
node and local CPU files a real host has under ``/sys/bus/pci/devices``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from gctl.hosts.gpu_probe import format_cpulist, sysfs_bus_id
from gctl.sim.cluster_spec import DEFAULT_GPU_MEMORY_MB, DEFAULT_GPU_TYPE, node_gpus, parse_gpu_kind

if TYPE_CHECKING:
    from gctl.hosts.gpu_probe import NvmlApi

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = 50

NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF

FAKE_DRIVER_VERSION = "550.00.00-fake"
"""What :meth:`FakeNVML.nvmlSystemGetDriverVersion` says unless told otherwise."""
TOPOLOGIES = ("pcie", "nvlink", "nvswitch")
"""Layouts :meth:`FakeNVML.from_spec` builds."""

_MIB = 1 << 20
_SPEC = re.compile(r"\s*(\d{1,2})\s*[xX]\s*(\S+)\s*")
_NVLINKS_PER_GPU = {"V100": 6, "A100": 12, "H100": 18, "H200": 18, "B200": 18}
"""Physical NVLinks per GPU of a type (12 for types not listed)."""
_NVSWITCHES = {"V100": 6, "A100": 6, "H100": 4, "H200": 4, "B200": 2}
"""NVSwitch chips a GPU's links are spread over (6 for types not listed)."""
_SWITCH_BUS_BASE = 0xE0
"""Fake NVSwitches sit on buses 0xE0 and up, above any fake GPU."""

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
"""pynvml's messages for the codes the fake raises."""


class NVMLError(Exception):
    """pynvml's error: ``NVMLError(code)`` is an instance of the code's subclass."""

    _code: ClassVar[int | None] = None
    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __init_subclass__(cls, code: int | None = None) -> None:
        """Register a subclass for its code, as pynvml generates them."""
        super().__init_subclass__()
        if code is not None:
            cls._code = code
            NVMLError._by_code[code] = cls

    def __new__(cls, value: int | None = None) -> NVMLError:
        """The subclass for ``value`` (subclasses know their own code)."""
        if cls is NVMLError and value is not None:
            cls = NVMLError._by_code.get(value, NVMLError)
        code = cls._code if cls._code is not None else value
        error = Exception.__new__(cls)
        error.value = NVML_ERROR_UNKNOWN if code is None else code
        return error

    def __init__(self, value: int | None = None) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")


_NVMLErrorBase = NVMLError
"""The base class under a name :class:`FakeNVML`'s own ``NVMLError`` does not hide."""


class NVMLError_Uninitialized(NVMLError, code=NVML_ERROR_UNINITIALIZED):  # noqa: D101
    pass


class NVMLError_InvalidArgument(NVMLError, code=NVML_ERROR_INVALID_ARGUMENT):  # noqa: D101
    pass


class NVMLError_NotSupported(NVMLError, code=NVML_ERROR_NOT_SUPPORTED):  # noqa: D101
    pass


class NVMLError_NoPermission(NVMLError, code=NVML_ERROR_NO_PERMISSION):  # noqa: D101
    pass


class NVMLError_AlreadyInitialized(NVMLError, code=NVML_ERROR_ALREADY_INITIALIZED):  # noqa: D101
    pass


class NVMLError_NotFound(NVMLError, code=NVML_ERROR_NOT_FOUND):  # noqa: D101
    pass


class NVMLError_InsufficientSize(NVMLError, code=NVML_ERROR_INSUFFICIENT_SIZE):  # noqa: D101
    pass


class NVMLError_DriverNotLoaded(NVMLError, code=NVML_ERROR_DRIVER_NOT_LOADED):  # noqa: D101
    pass


class NVMLError_LibraryNotFound(NVMLError, code=NVML_ERROR_LIBRARY_NOT_FOUND):  # noqa: D101
    pass


class NVMLError_FunctionNotFound(NVMLError, code=NVML_ERROR_FUNCTION_NOT_FOUND):  # noqa: D101
    pass


class NVMLError_GpuIsLost(NVMLError, code=NVML_ERROR_GPU_IS_LOST):  # noqa: D101
    pass


class NVMLError_Unknown(NVMLError, code=NVML_ERROR_UNKNOWN):  # noqa: D101
    pass


@dataclass(frozen=True)
class FakeHandle:
    """A fake device handle (pynvml's are opaque ctypes pointers)."""

    index: int


@dataclass(frozen=True)
class FakeMemoryInfo:
    """Fake ``c_nvmlMemory_t``: bytes."""

    total: int
    free: int
    used: int


@dataclass(frozen=True)
class FakePciInfo:
    """Fake ``nvmlPciInfo_t``: ``busId`` as recent pynvml returns it (str)."""

    busId: str
    domain: int
    bus: int
    device: int


@dataclass(frozen=True)
class FakeUtilization:
    """Fake ``c_nvmlUtilization_t``: percent."""

    gpu: int
    memory: int


@dataclass(frozen=True)
class FakeProcessInfo:
    """Fake process entry: ``usedGpuMemory`` in bytes, None when NVML cannot tell."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class FakeGPU:
    """One fake GPU: identity, place in the fake host, and its settable telemetry.

    ``nvlinks`` lists the far end of each physical link in order: a peer GPU
    index, ``"switch:<n>"`` for an NVSwitch, or None for an inactive link.
    """

    index: int
    name: str
    uuid: str
    memory_mb: int
    bus: int
    socket: int
    pcie_switch: int
    cpus: list[int]
    nvlinks: list[int | str | None] = field(default_factory=list)
    util_percent: int = 0
    memory_used_mb: int = 0
    compute: list[FakeProcessInfo] = field(default_factory=list)
    graphics: list[FakeProcessInfo] = field(default_factory=list)

    @property
    def bus_id(self) -> str:
        """NVML's form of the fake PCI address, e.g. ``00000000:06:00.0``."""
        return f"00000000:{self.bus:02X}:00.0"


class FakeNVML:
    """A fake ``pynvml`` module over fake GPUs (see the module docstring)."""

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Unknown = NVMLError_Unknown
    NVML_TOPOLOGY_INTERNAL = NVML_TOPOLOGY_INTERNAL
    NVML_TOPOLOGY_SINGLE = NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_MULTIPLE = NVML_TOPOLOGY_MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE = NVML_TOPOLOGY_HOSTBRIDGE
    NVML_TOPOLOGY_NODE = NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_CPU
    NVML_TOPOLOGY_SYSTEM = NVML_TOPOLOGY_SYSTEM
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_DEVICE_TYPE_GPU = NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = NVML_NVLINK_DEVICE_TYPE_IBMNPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = NVML_NVLINK_DEVICE_TYPE_UNKNOWN

    def __init__(self, gpus: list[FakeGPU], *, driver: str = FAKE_DRIVER_VERSION) -> None:
        """A fake host with these GPUs; see :meth:`from_spec` for the usual way."""
        self.gpus = gpus
        self.driver = driver
        self.init_count = 0
        """nvmlInit calls not yet matched by nvmlShutdown."""
        self._failures: dict[str, type[_NVMLErrorBase]] = {}

    @classmethod
    def from_spec(
        cls,
        spec: str,
        topology: str = "pcie",
        *,
        cores: int = 20,
        threads: int = 2,
        driver: str = FAKE_DRIVER_VERSION,
    ) -> FakeNVML:
        """A fake host from ``COUNTxTYPE-MEMORY`` (``8xV100-16GB``) or ``COUNT``.

        Raises:
            ValueError: A spec or topology it cannot build.

        """
        m = _SPEC.fullmatch(spec)
        if m is None:
            if not spec.strip().isdigit():
                raise ValueError(
                    f"fake GPUs {spec!r}: expected COUNTxTYPE-MEMORY, e.g. 8xV100-16GB"
                )
            count, gpu_type, memory_mb = int(spec), DEFAULT_GPU_TYPE, DEFAULT_GPU_MEMORY_MB
        else:
            count = int(m.group(1))
            gpu_type, memory_mb = parse_gpu_kind(m.group(2))
        if topology not in TOPOLOGIES:
            raise ValueError(f"fake topology {topology!r}: expected one of {', '.join(TOPOLOGIES)}")
        layout = node_gpus(
            count,
            gpu_type=gpu_type,
            memory_mb=memory_mb,
            topology="nvlink" if topology == "nvlink" else "pcie",
        )
        sockets = sorted({g.socket for g in layout})
        first_switch = {s: min(g.pcie_switch for g in layout if g.socket == s) for s in sockets}
        per_type = _NVLINKS_PER_GPU.get(gpu_type, 12)
        switch_chips = _NVSWITCHES.get(gpu_type, 6)
        gpus = []
        for g in layout:
            ahead = sum(1 for h in layout[: g.index] if h.pcie_switch == g.pcie_switch)
            local_switch = g.pcie_switch - first_switch[g.socket]
            ends: list[int | str | None] = []
            if topology == "nvswitch":
                ends = [f"switch:{link % switch_chips}" for link in range(per_type)]
            elif g.nvlink:
                ends = [peer for peer, links in g.nvlink for _ in range(links)]
                ends += [None] * max(0, per_type - len(ends))
            cpus = [
                t * cores * len(sockets) + g.socket * cores + c
                for t in range(threads)
                for c in range(cores)
            ]
            gpus.append(
                FakeGPU(
                    index=g.index,
                    name=_fake_name(gpu_type, memory_mb, sxm=topology != "pcie"),
                    uuid=f"GPU-fa7e0000-0000-4000-8000-{g.index:012x}",
                    memory_mb=memory_mb,
                    bus=0x06 + 0x7F * g.socket + 4 * local_switch + ahead,
                    socket=g.socket,
                    pcie_switch=g.pcie_switch,
                    cpus=cpus,
                    nvlinks=ends,
                )
            )
        return cls(gpus, driver=driver)

    # --- test controls ---------------------------------------------------------

    def set_usage(
        self, index: int, *, util_percent: int | None = None, memory_used_mb: int | None = None
    ) -> None:
        """Set the fake utilisation (percent) and memory in use (MiB) of a GPU."""
        gpu = self.gpus[index]
        if util_percent is not None:
            gpu.util_percent = util_percent
        if memory_used_mb is not None:
            gpu.memory_used_mb = memory_used_mb

    def add_process(
        self, index: int, pid: int, used_memory_mb: int | None, *, graphics: bool = False
    ) -> None:
        """Put a fake process on a GPU (``used_memory_mb`` None: NVML cannot tell)."""
        used = None if used_memory_mb is None else used_memory_mb * _MIB
        entry = FakeProcessInfo(pid=pid, usedGpuMemory=used)
        (self.gpus[index].graphics if graphics else self.gpus[index].compute).append(entry)

    def fail(self, function: str, error: type[_NVMLErrorBase] = NVMLError_Unknown) -> None:
        """Make every later call of the named pynvml function raise ``error``."""
        if not callable(getattr(self, function, None)):
            raise ValueError(f"FakeNVML has no function {function!r}")
        self._failures[function] = error

    def write_sysfs(self, sys_root: str | Path) -> None:
        """Write each fake GPU's ``vendor``, ``numa_node`` and ``local_cpulist`` in a sysfs."""
        for gpu in self.gpus:
            where = Path(sys_root, "bus", "pci", "devices", sysfs_bus_id(gpu.bus_id))
            where.mkdir(parents=True, exist_ok=True)
            (where / "vendor").write_text("0x10de\n")
            (where / "numa_node").write_text(f"{gpu.socket}\n")
            (where / "local_cpulist").write_text(format_cpulist(gpu.cpus) + "\n")

    # --- pynvml's API --------------------------------------------------------------

    def _enter(self, function: str) -> None:
        error = self._failures.get(function)
        if error is not None:
            raise error()
        if function != "nvmlInit" and self.init_count < 1:
            raise NVMLError_Uninitialized()

    def _gpu(self, function: str, handle: FakeHandle) -> FakeGPU:
        self._enter(function)
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return self.gpus[handle.index]

    def _link_end(self, function: str, handle: FakeHandle, link: int) -> int | str | None:
        gpu = self._gpu(function, handle)
        if not gpu.nvlinks:
            raise NVMLError_NotSupported()
        if not 0 <= link < len(gpu.nvlinks):
            raise NVMLError_InvalidArgument()
        return gpu.nvlinks[link]

    def nvmlInit(self) -> None:
        """Initialise the fake library (counted, like pynvml's)."""
        self._enter("nvmlInit")
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        """Release one initialisation."""
        self._enter("nvmlShutdown")
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        """The fake driver version."""
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        """Number of fake GPUs."""
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        """The handle of fake GPU ``index``."""
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        """The fake GPU's UUID."""
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        """The fake GPU's model name."""
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemoryInfo:
        """Total, free and used fake memory in bytes."""
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total, used = gpu.memory_mb * _MIB, gpu.memory_used_mb * _MIB
        return FakeMemoryInfo(total=total, free=total - used, used=used)

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        """The fake GPU's PCI address."""
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        return FakePciInfo(busId=gpu.bus_id, domain=0, bus=gpu.bus, device=0)

    def nvmlDeviceGetCpuAffinity(self, handle: FakeHandle, cpuSetSize: int) -> list[int]:
        """Bitmask of the fake GPU's near CPUs in ``cpuSetSize`` 64-bit words."""
        gpu = self._gpu("nvmlDeviceGetCpuAffinity", handle)
        words = [0] * cpuSetSize
        for cpu in gpu.cpus:
            if cpu // 64 < cpuSetSize:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: FakeHandle, device2: FakeHandle) -> int:
        """``NVML_TOPOLOGY_*`` level of the PCIe path between two fake GPUs."""
        a = self._gpu("nvmlDeviceGetTopologyCommonAncestor", device1)
        b = self._gpu("nvmlDeviceGetTopologyCommonAncestor", device2)
        if a.index == b.index:
            return NVML_TOPOLOGY_INTERNAL
        if a.socket != b.socket:
            return NVML_TOPOLOGY_SYSTEM
        if a.pcie_switch == b.pcie_switch:
            return NVML_TOPOLOGY_SINGLE
        return NVML_TOPOLOGY_NODE

    def nvmlDeviceGetNvLinkState(self, device: FakeHandle, link: int) -> int:
        """1 when the fake link is active, 0 when not; NVMLError for no such link."""
        end = self._link_end("nvmlDeviceGetNvLinkState", device, link)
        return 0 if end is None else 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: FakeHandle, link: int) -> FakePciInfo:
        """PCI address of the fake GPU or NVSwitch at the far end of a link."""
        end = self._link_end("nvmlDeviceGetNvLinkRemotePciInfo", device, link)
        if end is None:
            raise NVMLError_NotSupported()
        if isinstance(end, str):
            bus = _SWITCH_BUS_BASE + int(end.partition(":")[2])
            return FakePciInfo(busId=f"00000000:{bus:02X}:00.0", domain=0, bus=bus, device=0)
        peer = self.gpus[end]
        return FakePciInfo(busId=peer.bus_id, domain=0, bus=peer.bus, device=0)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:
        """``NVML_NVLINK_DEVICE_TYPE_*`` of the far end of a fake link."""
        end = self._link_end("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if end is None:
            return NVML_NVLINK_DEVICE_TYPE_UNKNOWN
        if isinstance(end, str):
            return NVML_NVLINK_DEVICE_TYPE_SWITCH
        return NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:
        """The fake utilisation set with :meth:`set_usage`."""
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        memory = gpu.memory_used_mb * 100 // gpu.memory_mb if gpu.memory_mb else 0
        return FakeUtilization(gpu=gpu.util_percent, memory=memory)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Fake compute processes added with :meth:`add_process`."""
        return list(self._gpu("nvmlDeviceGetComputeRunningProcesses", handle).compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[FakeProcessInfo]:
        """Fake graphics processes added with ``add_process(..., graphics=True)``."""
        return list(self._gpu("nvmlDeviceGetGraphicsRunningProcesses", handle).graphics)


def _fake_name(gpu_type: str, memory_mb: int, *, sxm: bool) -> str:
    """A model name in NVIDIA's style for a fake GPU of ``gpu_type``."""
    gb = round(memory_mb / 1024)
    if gpu_type == "V100":
        return f"Tesla V100-{'SXM2' if sxm else 'PCIE'}-{gb}GB"
    if gpu_type == "A100":
        return f"NVIDIA A100-{'SXM4' if sxm else 'PCIE'}-{gb}GB"
    if gpu_type == "H100":
        return f"NVIDIA H100 {gb}GB HBM3" if sxm else "NVIDIA H100 PCIe"
    return f"NVIDIA {gpu_type}"


if TYPE_CHECKING:

    def _conforms(fake: FakeNVML) -> NvmlApi:
        """Let mypy check that the fake offers everything the probe calls."""
        return fake
