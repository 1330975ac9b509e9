"""The GPU probe: NVML (through the fake), nvidia-smi parsers, /proc, and the script itself."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from gctl.core.model import GPU
from gctl.core.topology import Topology
from gctl.hosts import fake_nvml, gpu_probe
from gctl.hosts.fake_nvml import (
    FakeNVML,
    NVMLError,
    NVMLError_DriverNotLoaded,
    NVMLError_NotSupported,
    NVMLError_Uninitialized,
)
from gctl.hosts.gpu_probe import (
    COMPUTE_APPS_ARGS,
    NO_GPU_TOOLS,
    QUERY_GPU_ARGS,
    QUERY_USAGE_ARGS,
    TOPO_ARGS,
    CommandFailed,
    container_of,
    format_cpulist,
    gpu_records,
    inventory,
    parse_compute_apps,
    parse_cpulist,
    parse_query_gpu,
    parse_query_usage,
    parse_topo_matrix,
    short_model,
    telemetry,
)
from gctl.sim.cluster_spec import _DGX1_LINKS, node_gpus

DATA = Path(__file__).parent / "data"
PROBE = Path(gpu_probe.__file__)
ID_A = "4f3c2b1a" * 8
ID_B = "0123456789abcdef" * 4
ID_C = "fedcba9876543210" * 4


NO_GPUS = {
    "source": "none",
    "driver": None,
    "gpus": [],
    "links": [],
    "pcie_links": None,
    "error": NO_GPU_TOOLS,
}
"""The inventory of a host with neither NVML nor nvidia-smi."""


def sample(name: str) -> str:
    return (DATA / name).read_text()


def smi(host: str) -> Callable[[list[str]], str]:
    """A ``run`` answering nvidia-smi commands from the recorded samples of ``host``."""
    files = {
        QUERY_GPU_ARGS: f"{host}_query_gpu.csv",
        TOPO_ARGS: f"{host}_topo.txt",
        QUERY_USAGE_ARGS: f"{host}_usage.csv",
        COMPUTE_APPS_ARGS: f"{host}_compute_apps.csv",
    }

    def run(argv: list[str]) -> str:
        name = files.get(tuple(argv))
        if name is None:
            raise AssertionError(f"unexpected command {argv}")
        return sample(name)

    return run


def no_smi(argv: list[str]) -> str:
    raise FileNotFoundError(2, "No such file or directory", argv[0])


def gpus_of(records: list[dict[str, Any]]) -> tuple[GPU, ...]:
    """Records as the scheduler's GPU objects."""
    return tuple(
        GPU(
            index=r["index"],
            type=r["model"],
            memory_mb=r["memory_mb"],
            socket=r["socket"],
            pcie_switch=r["pcie_switch"],
            nvlink=tuple((p, n) for p, n in r["nvlink_peers"]),
        )
        for r in records
    )


def best_sets(gpus: tuple[GPU, ...], count: int) -> dict[int, tuple[int, ...] | None]:
    """The best set of ``count`` GPUs for every free mask."""
    topo = Topology(gpus)
    return {mask: topo.best_set(mask, count) for mask in range(1 << len(gpus))}


def link_map(inv: dict[str, Any]) -> dict[tuple[int, int], tuple[str, int]]:
    return {(i, j): (level, n) for i, j, level, n in inv["links"]}


def write_cgroup(proc: Path, pid: int, text: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(text)


# --- the fake NVML itself ---------------------------------------------------------


def test_fake_nvml_uses_pynvml_constants_and_error_classes() -> None:
    import pynvml

    names = [
        n
        for n in dir(fake_nvml)
        if n.startswith(("NVML_TOPOLOGY_", "NVML_NVLINK_", "NVML_ERROR_", "NVML_SUCCESS"))
    ]
    assert len(names) > 20
    for name in names:
        assert getattr(fake_nvml, name) == getattr(pynvml, name), name
        if name.startswith("NVML_TOPOLOGY_") or name.startswith("NVML_NVLINK_"):
            assert getattr(FakeNVML, name) == getattr(pynvml, name), name
    for name in names:
        if not name.startswith("NVML_ERROR_"):
            continue
        code = getattr(pynvml, name)
        ours, theirs = NVMLError(code), pynvml.NVMLError(code)
        assert type(ours).__name__ == type(theirs).__name__
        assert ours.value == theirs.value == code
        assert str(ours) == str(theirs)
        assert isinstance(ours, NVMLError)
    bare = NVMLError_NotSupported()
    assert bare.value == pynvml.NVMLError_NotSupported().value == 3
    assert isinstance(NVMLError(12345), NVMLError)
    assert NVMLError(12345).value == 12345


def test_fake_nvml_behaves_like_the_library() -> None:
    fake = FakeNVML.from_spec("2xA100-80GB", topology="pcie")
    with pytest.raises(NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(1)
    assert fake.nvmlDeviceGetName(handle) == "NVIDIA A100-PCIE-80GB"
    assert fake.nvmlDeviceGetMemoryInfo(handle).total == 80 * 1024 * (1 << 20)
    assert isinstance(fake.nvmlDeviceGetPciInfo(handle).busId, str)
    with pytest.raises(NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(handle, 0)
    with pytest.raises(fake.NVMLError):
        fake.nvmlDeviceGetHandleByIndex(2)
    fake.fail("nvmlDeviceGetUUID", NVMLError_DriverNotLoaded)
    with pytest.raises(NVMLError_DriverNotLoaded):
        fake.nvmlDeviceGetUUID(handle)
    with pytest.raises(ValueError, match="no function"):
        fake.fail("nvmlDeviceGetTemperature")
    fake.nvmlShutdown()
    assert fake.init_count == 0
    with pytest.raises(ValueError):
        FakeNVML.from_spec("8xV100-16GB", topology="mesh")
    with pytest.raises(ValueError):
        FakeNVML.from_spec("eight")


# --- inventory through NVML ----------------------------------------------------------


def test_nvml_inventory_of_a_dgx1(tmp_path: Path) -> None:
    fake = FakeNVML.from_spec("8xV100-16GB", topology="nvlink")
    fake.write_sysfs(tmp_path)
    inv = inventory(nvml=fake, run=no_smi, sys_root=str(tmp_path))
    assert inv["source"] == "nvml"
    assert inv["error"] is None
    assert inv["driver"] == fake_nvml.FAKE_DRIVER_VERSION
    assert fake.init_count == 0  # shut down again
    gpus = inv["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["model"] for g in gpus} == {"Tesla V100-SXM2-16GB"}
    assert {g["memory_mb"] for g in gpus} == {16384}
    assert [g["pci_bus_id"] for g in gpus][:5] == [
        "00000000:06:00.0",
        "00000000:07:00.0",
        "00000000:0A:00.0",
        "00000000:0B:00.0",
        "00000000:85:00.0",
    ]
    assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert gpus[0]["cpu_affinity"] == [*range(0, 20), *range(40, 60)]
    assert gpus[7]["cpu_affinity"] == [*range(20, 40), *range(60, 80)]
    assert len({g["uuid"] for g in gpus}) == 8
    links = link_map(inv)
    assert sorted(links) == list(combinations(range(8), 2))
    nvlinked = {(a, b): n for a, b, n in _DGX1_LINKS}
    for (a, b), (level, n) in links.items():
        if (a, b) in nvlinked:
            assert (level, n) == (f"NV{nvlinked[a, b]}", nvlinked[a, b])
        else:
            assert (level, n) == ("SYS", 0), (a, b)  # the DGX-1's only non-NVLink pairs
    assert links[0, 3] == ("NV2", 2)
    assert links[0, 4] == ("NV2", 2)  # NVLink across the sockets
    assert links[0, 5] == ("SYS", 0)
    pcie = {(i, j): level for i, j, level in inv["pcie_links"]}
    assert pcie[0, 1] == "PIX"
    assert pcie[0, 2] == "NODE"
    assert pcie[0, 4] == "SYS"
    assert pcie[6, 7] == "PIX"


def test_nvml_inventory_of_a_pcie_box_and_an_nvswitch_box() -> None:
    pcie = inventory(nvml=FakeNVML.from_spec("4xA100-40GB"), run=no_smi, sys_root=None)
    assert link_map(pcie) == {
        (0, 1): ("PIX", 0),
        (0, 2): ("SYS", 0),
        (0, 3): ("SYS", 0),
        (1, 2): ("SYS", 0),
        (1, 3): ("SYS", 0),
        (2, 3): ("PIX", 0),
    }
    h100 = inventory(
        nvml=FakeNVML.from_spec("8xH100-80GB", topology="nvswitch"), run=no_smi, sys_root=None
    )
    assert h100["gpus"][0]["model"] == "NVIDIA H100 80GB HBM3"
    assert set(link_map(h100).values()) == {("NV18", 18)}
    assert len(h100["links"]) == 28
    records = gpu_records(h100)
    assert records[3]["nvlink_peers"] == [[p, 18] for p in range(8) if p != 3]
    assert [r["socket"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_nvml_inventory_without_pcie_topology_guesses_from_numa(tmp_path: Path) -> None:
    fake = FakeNVML.from_spec("4xV100-16GB", topology="pcie")
    fake.write_sysfs(tmp_path)
    fake.fail("nvmlDeviceGetTopologyCommonAncestor", NVMLError_NotSupported)
    inv = inventory(nvml=fake, run=no_smi, sys_root=str(tmp_path))
    assert inv["source"] == "nvml"
    assert inv["error"] == "PCIe topology: Not Supported"
    assert inv["pcie_links"] is None
    assert link_map(inv)[0, 1] == ("NODE", 0)
    assert link_map(inv)[1, 2] == ("SYS", 0)
    assert [r["socket"] for r in gpu_records(inv)] == [0, 0, 1, 1]


def test_nvml_failing_falls_back_to_nvidia_smi() -> None:
    fake = FakeNVML.from_spec("8xV100-16GB", topology="nvlink")
    fake.fail("nvmlInit", NVMLError_DriverNotLoaded)
    inv = inventory(nvml=fake, run=smi("dgx1"), sys_root=None)
    assert inv["source"] == "nvidia-smi"
    assert len(inv["gpus"]) == 8

    fake = FakeNVML.from_spec("8xV100-16GB", topology="nvlink")
    fake.fail("nvmlDeviceGetName", NVMLError_NotSupported)
    inv = inventory(nvml=fake, run=smi("dgx1"), sys_root=None)
    assert inv["source"] == "nvidia-smi"
    assert fake.init_count == 0

    fake = FakeNVML.from_spec("8xV100-16GB", topology="nvlink")
    fake.fail("nvmlDeviceGetCount", NVMLError_DriverNotLoaded)
    inv = inventory(nvml=fake, run=no_smi, sys_root=None)
    assert inv["source"] == "none"
    assert inv["error"] == "NVML: Driver Not Loaded"


def test_no_nvml_and_no_nvidia_smi_is_no_gpus() -> None:
    assert inventory(nvml=False, run=no_smi) == NO_GPUS
    assert telemetry(nvml=False, run=no_smi) == {
        "source": "none",
        "gpus": [],
        "processes": [],
        "error": NO_GPU_TOOLS,
    }


def test_a_failing_nvidia_smi_is_reported() -> None:
    def broken(argv: list[str]) -> str:
        raise CommandFailed(
            "nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate"
            " with the NVIDIA driver."
        )

    inv = inventory(nvml=False, run=broken, sys_root=None)
    assert inv["source"] == "none"
    assert inv["gpus"] == []
    assert inv["error"].startswith("nvidia-smi: nvidia-smi exited 9: NVIDIA-SMI has failed")


def test_topology_failure_keeps_the_gpu_list() -> None:
    answers = smi("pcie4")

    def run(argv: list[str]) -> str:
        if tuple(argv) == TOPO_ARGS:
            raise CommandFailed("nvidia-smi exited 2: Invalid combination of input arguments.")
        return answers(argv)

    inv = inventory(nvml=False, run=run, sys_root=None)
    assert inv["source"] == "nvidia-smi"
    assert len(inv["gpus"]) == 4
    assert inv["links"] == []
    assert inv["error"].startswith("nvidia-smi topo -m: nvidia-smi exited 2")
    assert [r["socket"] for r in gpu_records(inv)] == [0, 0, 0, 0]
    assert [r["pcie_switch"] for r in gpu_records(inv)] == [0, 1, 2, 3]


# --- what the scheduler gets -------------------------------------------------------------


@pytest.mark.parametrize("with_sysfs", [True, False])
def test_records_of_a_fake_dgx1_are_the_simulators_dgx1(tmp_path: Path, with_sysfs: bool) -> None:
    fake = FakeNVML.from_spec("8xV100-16GB", topology="nvlink")
    fake.write_sysfs(tmp_path)
    inv = inventory(nvml=fake, run=no_smi, sys_root=str(tmp_path) if with_sysfs else None)
    records = gpu_records(json.loads(json.dumps(inv)))  # as it arrives over SSH
    assert [r["model"] for r in records] == ["V100"] * 8
    assert records[0]["model_name"] == "Tesla V100-SXM2-16GB"
    assert records[0]["cpu_affinity"] == "0-19,40-59"
    assert records[0]["numa_node"] == (0 if with_sysfs else None)
    assert records[0]["nvlink_peers"] == [[1, 1], [2, 1], [3, 2], [4, 2]]
    sim = node_gpus(8, topology="nvlink")
    ours = gpus_of(records)
    assert ours == sim
    for count in (2, 4):
        assert best_sets(ours, count) == best_sets(sim, count)
    assert Topology(ours).best_set(0xFF, 2) == (0, 3)
    assert Topology(ours).best_set(0xFF, 4) == (0, 1, 2, 3)


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_records_of_fake_pcie_boxes_are_the_simulators(tmp_path: Path, size: int) -> None:
    fake = FakeNVML.from_spec(f"{size}xA100-80GB", topology="pcie")
    fake.write_sysfs(tmp_path)
    records = gpu_records(inventory(nvml=fake, run=no_smi, sys_root=str(tmp_path)))
    sim = node_gpus(size, gpu_type="A100", memory_mb=81920, topology="pcie")
    assert gpus_of(records) == sim


def test_records_of_a_recorded_dgx1_pick_what_the_simulator_picks() -> None:
    inv = inventory(nvml=False, run=smi("dgx1"), sys_root=None)
    records = gpu_records(inv)
    assert [r["socket"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [r["numa_node"] for r in records] == [None] * 8  # an old topo: no NUMA column
    assert [r["cpu_affinity"] for r in records] == ["0-19,40-59"] * 4 + ["20-39,60-79"] * 4
    assert [r["memory_mb"] for r in records] == [16160] * 8
    sim = node_gpus(8, topology="nvlink")
    ours = gpus_of(records)
    assert [g.nvlink for g in ours] == [g.nvlink for g in sim]
    # nvidia-smi's matrix shows NVLink, not the PCIe switch behind it; on a
    # DGX-1 every same-socket pair is NVLinked, so no choice depends on it.
    assert Topology(ours).score == Topology(sim).score
    for count in (2, 4):
        assert best_sets(ours, count) == best_sets(sim, count)


def test_records_of_recorded_pcie_boxes() -> None:
    four = gpu_records(inventory(nvml=False, run=smi("pcie4"), sys_root=None))
    assert [r["numa_node"] for r in four] == [0, 0, 1, 1]
    assert [(r["socket"], r["pcie_switch"]) for r in four] == [
        (g.socket, g.pcie_switch) for g in node_gpus(4, topology="pcie")
    ]
    assert {r["model"] for r in four} == {"A100"}
    sim4 = node_gpus(4, topology="pcie")
    for count in (2, 3):
        assert best_sets(gpus_of(four), count) == best_sets(sim4, count)

    eight = gpu_records(inventory(nvml=False, run=smi("pcie8"), sys_root=None))
    assert [r["socket"] for r in eight] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [r["pcie_switch"] for r in eight] == [0, 0, 0, 0, 1, 1, 1, 1]  # PXB joins them
    assert {r["model"] for r in eight} == {"L40S"}
    assert all(r["nvlink_peers"] == [] for r in eight)

    one = gpu_records(inventory(nvml=False, run=smi("single"), sys_root=None))
    assert one == [
        {
            "index": 0,
            "uuid": "GPU-8d6b1c2a-93f4-e5d6-07a8-b9c0d1e2f3a4",
            "model": "RTX3090",
            "model_name": "NVIDIA GeForce RTX 3090",
            "memory_mb": 24576,
            "numa_node": 0,
            "cpu_affinity": "0-11",
            "socket": 0,
            "pcie_switch": 0,
            "nvlink_peers": [],
        }
    ]


def test_records_when_numa_contradicts_the_links() -> None:
    """All GPUs claim NUMA node 0 but two are SYS apart: they get different sockets."""
    inv = {
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "model": "Tesla T4",
                "memory_mb": 15360,
                "numa_node": 0,
            }
            for i in range(3)
        ],
        "links": [[0, 1, "SYS", 0], [0, 2, "PHB", 0], [1, 2, "SYS", 0]],
        "pcie_links": None,
    }
    records = gpu_records(inv)
    assert [r["socket"] for r in records] == [0, 1, 0]
    assert [r["pcie_switch"] for r in records] == [0, 1, 2]
    assert records[0]["model"] == "T4"
    assert records[0]["cpu_affinity"] is None


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla V100-PCIE-32GB", "V100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("Tesla K80", "K80"),
        ("Tesla T4", "T4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA GeForce RTX 3090", "RTX3090"),
        ("NVIDIA RTX A6000", "RTXA6000"),
        ("Quadro RTX 8000", "RTX8000"),
        ("NVIDIA", "NVIDIA"),
    ],
)
def test_short_model(name: str, short: str) -> None:
    assert short_model(name) == short


# --- nvidia-smi parsers ----------------------------------------------------------------------


def test_parse_topo_matrix_of_a_dgx1() -> None:
    topo = parse_topo_matrix(sample("dgx1_topo.txt"))
    assert topo["count"] == 8
    assert len(topo["links"]) == 28  # the legend and the NIC rows add nothing
    links = {(i, j): (level, n) for i, j, level, n in topo["links"]}
    for a, b, n in _DGX1_LINKS:
        assert links[a, b] == (f"NV{n}", n)
    assert links[0, 5] == ("SYS", 0)
    assert links[3, 6] == ("SYS", 0)
    assert topo["numa_node"] == [None] * 8
    assert topo["cpu_affinity"][0] == [*range(0, 20), *range(40, 60)]
    assert topo["cpu_affinity"][4] == [*range(20, 40), *range(60, 80)]


def test_parse_topo_matrix_without_tabs() -> None:
    """A matrix pasted into a ticket has spaces for tabs: same answer."""
    text = sample("dgx1_topo.txt")
    assert parse_topo_matrix(text.expandtabs(8)) == parse_topo_matrix(text)
    text = sample("pcie4_topo.txt")
    assert parse_topo_matrix(text.expandtabs(8)) == parse_topo_matrix(text)


def test_parse_topo_matrix_of_newer_drivers() -> None:
    four = parse_topo_matrix(sample("pcie4_topo.txt"))  # underlined header, NIC, NUMA columns
    assert four == {
        "count": 4,
        "links": [
            [0, 1, "PIX", 0],
            [0, 2, "SYS", 0],
            [0, 3, "SYS", 0],
            [1, 2, "SYS", 0],
            [1, 3, "SYS", 0],
            [2, 3, "PIX", 0],
        ],
        "numa_node": [0, 0, 1, 1],
        "cpu_affinity": [
            [*range(0, 16), *range(32, 48)],
            [*range(0, 16), *range(32, 48)],
            [*range(16, 32), *range(48, 64)],
            [*range(16, 32), *range(48, 64)],
        ],
    }
    h100 = parse_topo_matrix(sample("dgxh100_topo.txt"))
    assert h100["count"] == 8
    assert {(level, n) for _, _, level, n in h100["links"]} == {("NV18", 18)}
    assert h100["numa_node"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len(h100["cpu_affinity"][7]) == 112
    eight = parse_topo_matrix(sample("pcie8_topo.txt"))
    levels = {(i, j): level for i, j, level, _ in eight["links"]}
    assert (levels[0, 1], levels[0, 2], levels[0, 4], levels[6, 7]) == ("PIX", "PXB", "SYS", "PIX")
    one = parse_topo_matrix(sample("single_topo.txt"))
    assert one == {"count": 1, "links": [], "numa_node": [0], "cpu_affinity": [list(range(12))]}


def test_parse_topo_matrix_of_old_words_and_errors() -> None:
    old = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t8-15\n"
    assert parse_topo_matrix(old)["links"] == [[0, 1, "SYS", 0]]
    with pytest.raises(ValueError):
        parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the driver.")


def test_parse_query_gpu() -> None:
    gpus = parse_query_gpu(sample("dgx1_query_gpu.csv"))
    assert len(gpus) == 8
    assert gpus[2] == {
        "index": 2,
        "uuid": "GPU-5d2c9e7a-0b1f-4e3d-9c8b-7a6f5e4d3c2b",
        "model": "Tesla V100-SXM2-16GB",
        "memory_mb": 16160,
        "pci_bus_id": "00000000:0A:00.0",
        "driver": "418.126.02",
    }
    # The query without driver_version, out of order, a blank line, memory unknown:
    text = (
        "1, GPU-b, Tesla T4, [N/A], 00000000:AF:00.0\n"
        "\n"
        "0, GPU-a, Tesla T4, 15360, 00000000:3B:00.0\n"
    )
    assert parse_query_gpu(text) == [
        {
            "index": 0,
            "uuid": "GPU-a",
            "model": "Tesla T4",
            "memory_mb": 15360,
            "pci_bus_id": "00000000:3B:00.0",
            "driver": None,
        },
        {
            "index": 1,
            "uuid": "GPU-b",
            "model": "Tesla T4",
            "memory_mb": None,
            "pci_bus_id": "00000000:AF:00.0",
            "driver": None,
        },
    ]
    assert parse_query_gpu("No devices were found\n") == []


def test_parse_compute_apps_and_usage() -> None:
    apps = parse_compute_apps(sample("dgx1_compute_apps.csv"))
    assert len(apps) == 5
    assert apps[0] == {
        "gpu_uuid": "GPU-a8b7f2e1-3c4d-5e6f-7a8b-9c0d1e2f3a4b",
        "pid": 24517,
        "used_memory_mb": 15204,
    }
    assert apps[4]["pid"] == 31337
    assert apps[4]["used_memory_mb"] is None  # "[N/A]"
    assert parse_compute_apps("") == []
    usage = parse_query_usage(sample("dgx1_usage.csv"))
    assert usage[0] == {
        "index": 0,
        "uuid": "GPU-a8b7f2e1-3c4d-5e6f-7a8b-9c0d1e2f3a4b",
        "util_percent": 97,
        "memory_used_mb": 15523,
        "memory_total_mb": 16160,
    }
    assert parse_query_usage("0, GPU-x, [N/A], 10, 40960\n")[0]["util_percent"] is None


def test_cpulists() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []
    assert parse_cpulist("N/A") is None
    assert format_cpulist([11, 10, 8, 3, 2, 1, 0, 0]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""
    cpus = [*range(0, 56), *range(112, 168)]
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_smi_inventory_reads_sysfs_first(tmp_path: Path) -> None:
    devices = tmp_path / "bus" / "pci" / "devices"
    for bus, vendor, numa, cpus in [
        ("0000:17:00.0", "0x10de", "3", "4-5"),  # GPU0 of pcie4, as sysfs spells it
        ("0000:31:00.0", "0x10de", "-1", ""),  # GPU1: the kernel does not know
        ("0000:b1:00.0", "0x8086", "7", "0-1"),  # not an NVIDIA device: ignored
    ]:
        (devices / bus).mkdir(parents=True)
        (devices / bus / "vendor").write_text(vendor + "\n")
        (devices / bus / "numa_node").write_text(numa + "\n")
        (devices / bus / "local_cpulist").write_text(cpus + "\n")
    inv = inventory(nvml=False, run=smi("pcie4"), sys_root=str(tmp_path))
    assert inv["driver"] == "535.129.03"
    assert [g["numa_node"] for g in inv["gpus"]] == [3, 0, 1, 1]  # else topo's NUMA column
    assert inv["gpus"][0]["cpu_affinity"] == [4, 5]
    assert inv["gpus"][1]["cpu_affinity"] == [*range(0, 16), *range(32, 48)]  # empty: topo's
    assert inv["gpus"][2]["cpu_affinity"] == [*range(16, 32), *range(48, 64)]


# --- /proc and telemetry ---------------------------------------------------------------


def test_container_of(tmp_path: Path) -> None:
    write_cgroup(tmp_path, 100, f"0::/system.slice/docker-{ID_A}.scope\n")
    write_cgroup(
        tmp_path,
        101,
        f"12:memory:/docker/{ID_B}\n11:cpu,cpuacct:/docker/{ID_B}\n1:name=systemd:/docker/{ID_B}\n",
    )
    write_cgroup(tmp_path, 102, f"0::/gctl-h1/{ID_C}\n")
    write_cgroup(
        tmp_path,
        103,
        f"11:memory:/kubepods/besteffort/pod6f0c3a4e-8b1d-4c2e-9f3a-5d7b9e1c3a5f/{ID_A}\n",
    )
    write_cgroup(tmp_path, 104, "0::/user.slice/user-1000.slice/session-3.scope\n")
    write_cgroup(tmp_path, 105, f"1:name=systemd:/\n0::/docker/{ID_A}/docker/{ID_B}\n")
    write_cgroup(tmp_path, 106, f"0::/\n12:memory:/system.slice/docker-{ID_C}.scope\n")
    assert container_of(100, str(tmp_path)) == ID_A
    assert container_of(101, str(tmp_path)) == ID_B
    assert container_of(102, str(tmp_path)) == ID_C
    assert container_of(103, str(tmp_path)) == ID_A
    assert container_of(104, str(tmp_path)) is None
    assert container_of(105, str(tmp_path)) == ID_B  # docker in docker: the innermost
    assert container_of(106, str(tmp_path)) == ID_C
    assert container_of(999, str(tmp_path)) is None  # gone
    assert container_of(os.getpid()) is None or len(container_of(os.getpid()) or "") == 64


def test_telemetry_through_nvml_maps_processes_to_containers(tmp_path: Path) -> None:
    fake = FakeNVML.from_spec("4xV100-32GB", topology="nvlink")
    fake.set_usage(0, util_percent=97, memory_used_mb=30000)
    fake.set_usage(1, util_percent=12, memory_used_mb=5000)
    fake.add_process(0, 4242, 29000)
    fake.add_process(1, 4243, 2500)
    fake.add_process(1, 4243, 2600, graphics=True)  # the same process listed twice
    fake.add_process(1, 5555, None)  # memory unknown
    write_cgroup(tmp_path, 4242, f"0::/system.slice/docker-{ID_A}.scope\n")
    write_cgroup(tmp_path, 4243, f"12:memory:/docker/{ID_B}\n")

    def must_not_run(argv: list[str]) -> str:
        raise AssertionError(argv)

    doc = telemetry(nvml=fake, run=must_not_run, proc_root=str(tmp_path))
    assert fake.init_count == 0
    assert doc["source"] == "nvml"
    assert doc["error"] is None
    assert doc["gpus"][0] == {
        "index": 0,
        "uuid": "GPU-fa7e0000-0000-4000-8000-000000000000",
        "util_percent": 97,
        "memory_used_mb": 30000,
        "memory_total_mb": 32768,
    }
    assert doc["gpus"][3]["util_percent"] == 0
    uuid1 = "GPU-fa7e0000-0000-4000-8000-000000000001"
    assert doc["processes"] == [
        {
            "gpu_uuid": "GPU-fa7e0000-0000-4000-8000-000000000000",
            "pid": 4242,
            "used_memory_mb": 29000,
            "container_id": ID_A,
        },
        {"gpu_uuid": uuid1, "pid": 4243, "used_memory_mb": 2600, "container_id": ID_B},
        {"gpu_uuid": uuid1, "pid": 5555, "used_memory_mb": None, "container_id": None},
    ]
    assert (
        telemetry(nvml=fake, run=must_not_run, proc_root=None)["processes"][0]["container_id"]
        is None
    )


def test_telemetry_falls_back_to_nvidia_smi(tmp_path: Path) -> None:
    uuid6 = "GPU-c2d3e4f5-a6b7-c8d9-e0f1-a2b3c4d5e6f7"
    write_cgroup(tmp_path, 24517, f"0::/system.slice/docker-{ID_A}.scope\n")
    doc = telemetry(nvml=False, run=smi("dgx1"), proc_root=str(tmp_path))
    assert doc["source"] == "nvidia-smi"
    assert doc["error"] is None
    assert [g["util_percent"] for g in doc["gpus"]] == [97, 96, 98, 95, 0, 0, 31, 0]
    assert doc["processes"][0]["container_id"] == ID_A
    assert doc["processes"][1]["container_id"] is None
    assert doc["processes"][4] == {
        "gpu_uuid": uuid6,
        "pid": 31337,
        "used_memory_mb": None,
        "container_id": None,
    }
    # NVML answers for the GPUs but cannot list processes: nvidia-smi lists them.
    fake = FakeNVML.from_spec("8xV100-16GB", topology="nvlink")
    fake.fail("nvmlDeviceGetComputeRunningProcesses", NVMLError_NotSupported)
    doc = telemetry(nvml=fake, run=smi("dgx1"), proc_root=str(tmp_path))
    assert doc["source"] == "nvml"
    assert len(doc["processes"]) == 5
    # ... and when nvidia-smi cannot either, the GPU figures still come back.
    doc = telemetry(nvml=fake, run=no_smi, proc_root=str(tmp_path))
    assert doc["source"] == "nvml"
    assert len(doc["gpus"]) == 8
    assert doc["processes"] == []
    assert doc["error"].startswith("processes: ")


# --- the script, run as gctl runs it ---------------------------------------------------------


def run_probe(
    tmp_path: Path, mode: str, *, python: list[str] | None = None, fake_smi: str | None = None
) -> tuple[int, dict[str, Any], str]:
    """Run the probe's source as ``python3 - MODE`` in an empty dir where gctl is not importable."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if fake_smi is not None:
        write_fake_nvidia_smi(bin_dir / "nvidia-smi", fake_smi)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {"PATH": str(bin_dir), "LANG": "C.UTF-8"}
    done = subprocess.run(
        [*(python or [sys.executable, "-S"]), "-", mode],
        input=PROBE.read_text(),
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=60,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    return done.returncode, json.loads(lines[0]), done.stderr


def write_fake_nvidia_smi(path: Path, host: str) -> None:
    """A fake nvidia-smi that prints the recorded samples of ``host``."""
    answers = {
        " ".join(QUERY_GPU_ARGS[1:]): f"{host}_query_gpu.csv",
        " ".join(TOPO_ARGS[1:]): f"{host}_topo.txt",
        " ".join(QUERY_USAGE_ARGS[1:]): f"{host}_usage.csv",
        " ".join(COMPUTE_APPS_ARGS[1:]): f"{host}_compute_apps.csv",
    }
    path.write_text(
        f"#!{sys.executable} -S\n"
        "import sys\n"
        f"answers = {answers!r}\n"
        "name = answers.get(' '.join(sys.argv[1:]))\n"
        "if name is None:\n"
        "    sys.exit('fake nvidia-smi: unexpected arguments %r' % sys.argv[1:])\n"
        f"sys.stdout.write(open({str(DATA)!r} + '/' + name).read())\n"
    )
    path.chmod(0o755)


def test_script_is_standalone_and_says_none_without_gpu_tools(tmp_path: Path) -> None:
    rc, doc, _ = run_probe(tmp_path, "inventory")
    assert rc == 0
    assert doc == NO_GPUS
    rc, doc, _ = run_probe(tmp_path, "telemetry")
    assert rc == 0
    assert doc == {"source": "none", "gpus": [], "processes": [], "error": NO_GPU_TOOLS}


def test_script_with_pynvml_but_no_driver(tmp_path: Path) -> None:
    rc, doc, _ = run_probe(tmp_path, "inventory", python=[sys.executable])
    assert rc == 0
    if doc["source"] == "nvml":  # a machine with a real GPU
        assert doc["gpus"]
    else:
        assert doc["source"] == "none"
        assert doc["error"] == NO_GPU_TOOLS


def test_script_uses_nvidia_smi_when_there_is_no_nvml(tmp_path: Path) -> None:
    rc, doc, stderr = run_probe(tmp_path, "inventory", fake_smi="dgx1")
    assert rc == 0, stderr
    assert doc["source"] == "nvidia-smi"
    assert doc["error"] is None
    assert doc["driver"] == "418.126.02"
    assert [g["model"] for g in doc["gpus"]] == ["Tesla V100-SXM2-16GB"] * 8
    assert doc["gpus"][4]["cpu_affinity"] == [*range(20, 40), *range(60, 80)]
    assert link_map(doc)[0, 4] == ("NV2", 2)
    assert link_map(doc) == link_map(inventory(nvml=False, run=smi("dgx1"), sys_root=None))
    rc, doc, stderr = run_probe(tmp_path, "telemetry", fake_smi="dgx1")
    assert rc == 0, stderr
    assert doc["source"] == "nvidia-smi"
    assert len(doc["gpus"]) == 8
    assert [p["pid"] for p in doc["processes"]] == [24517, 24518, 24519, 24520, 31337]


def _python38() -> str | None:
    """A Python 3.8 interpreter, the oldest a GPU host may have, if this machine has one."""
    candidates = [shutil.which("python3.8")]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"), "versions")
    candidates += [str(p) for p in sorted(root.glob("3.8*/bin/python3.8"))]
    for exe in candidates:
        if exe and subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
            return exe
    return None


def test_script_runs_on_python_3_8(tmp_path: Path) -> None:
    ast.parse(PROBE.read_text(), feature_version=(3, 8))  # no syntax newer than the oldest host
    exe = _python38()
    if exe is None:  # pyenv machines have one; elsewhere the syntax check above has to do
        return
    rc, doc, stderr = run_probe(tmp_path, "inventory", python=[exe, "-S"], fake_smi="pcie4")
    assert rc == 0, stderr
    assert doc["source"] == "nvidia-smi"
    assert [g["numa_node"] for g in doc["gpus"]] == [0, 0, 1, 1]
    rc, doc, stderr = run_probe(tmp_path / "none", "telemetry", python=[exe, "-S"])
    assert rc == 0, stderr
    assert doc["error"] == NO_GPU_TOOLS


def test_script_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-S", "-", "inventroy"],
        input=PROBE.read_text(),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "usage" in done.stderr


def test_script_ends_with_its_main() -> None:
    assert (
        PROBE.read_text()
        .rstrip()
        .endswith('if __name__ == "__main__":\n    sys.exit(main(sys.argv[1:]))')
    )
    imported = set()
    for node in ast.walk(ast.parse(PROBE.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names)  # pynvml is imported by name, if at all
