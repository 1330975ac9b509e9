"""How ``gctl node top`` attributes measured GPU use to jobs (fake NVML, no host needed)."""

from __future__ import annotations

from pathlib import Path

from gctl.hosts import gpu_probe
from gctl.hosts.engine import (
    LABEL_EMULATED_GPU_MEM,
    LABEL_EMULATED_UTIL,
    LABEL_GPU_MEM,
    LABEL_GPUS,
    LABEL_JOB,
    ContainerState,
)
from gctl.hosts.fake_nvml import FakeNVML
from gctl.hosts.ssh import Target
from gctl.services import hostops
from gctl.services.hostops import Host, HostGpu
from gctl.services.telemetry import attribute_emulated, attribute_measured
from gctl.store.models import GpuRow

CID_A = "a" * 64
CID_B = "b" * 64


def _container(
    cid: str,
    job: int,
    gpus: str,
    *,
    paused: bool = False,
    util: str | None = None,
    **more: str,
) -> ContainerState:
    labels = {LABEL_JOB: str(job), LABEL_GPUS: gpus, **more}
    if util is not None:
        labels[LABEL_EMULATED_UTIL] = util
    return ContainerState(
        id=cid,
        name=f"gctl-{job}-0",
        status="paused" if paused else "running",
        running=True,
        paused=paused,
        exit_code=None,
        oom_killed=False,
        error=None,
        labels=labels,
    )


def _proc(root: Path, pid: int, cid: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(f"12:memory:/gctl-h1/{cid}\n")


def test_measured_use_is_split_among_the_jobs_on_each_gpu(tmp_path: Path) -> None:
    nvml = FakeNVML.from_spec("2xV100-16GB")
    nvml.set_usage(0, util_percent=80, memory_used_mb=9000)
    nvml.set_usage(1, util_percent=40, memory_used_mb=2000)
    nvml.add_process(0, 101, 5000)
    nvml.add_process(0, 202, 4000)
    nvml.add_process(1, 203, 2000)
    _proc(tmp_path, 101, CID_A)
    _proc(tmp_path, 202, CID_B)
    _proc(tmp_path, 203, CID_B)
    doc = gpu_probe.telemetry(nvml, proc_root=str(tmp_path))
    gpus = (HostGpu(0, "V100", 16384), HostGpu(1, "V100", 16384))
    node = Host(Target("h1", "x"), None, False, gpus, "s1")
    got = attribute_measured(node, [_container(CID_A, 1, "0"), _container(CID_B, 2, "0,1")], doc)
    assert got.source == "nvml" and got.error is None
    assert [(g.util_percent, g.memory_used_mb, g.jobs) for g in got.gpus] == [
        (80, 9000, (1, 2)),
        (40, 2000, (2,)),
    ]
    jobs = {j.job_id: j for j in got.jobs}
    assert (jobs[1].util_percent, jobs[1].memory_mb) == (40.0, 5000)
    assert (jobs[2].util_percent, jobs[2].memory_mb) == (40.0, 6000)  # (80/2 + 40) / 2
    assert (jobs[1].memory_peak_mb, jobs[2].memory_peak_mb) == (5000, 4000)  # its most on a GPU
    assert not any(j.emulated for j in jobs.values())

    paused = attribute_measured(
        node, [_container(CID_A, 1, "0"), _container(CID_B, 2, "0,1", paused=True)], doc
    )
    jobs = {j.job_id: j for j in paused.jobs}
    assert (jobs[1].util_percent, jobs[2].util_percent) == (80.0, 0.0)


def test_cpuset_is_the_cpus_near_all_the_gpus() -> None:
    near = [GpuRow(index=0, cpu_affinity="0-3"), GpuRow(index=1, cpu_affinity="8-11,4")]
    assert hostops.cpuset(near) == "0-4,8-11"
    assert hostops.cpuset([*near, GpuRow(index=2, cpu_affinity=None)]) is None
    assert hostops.cpuset([]) is None


def test_numa_memory_is_that_of_the_gpus_nodes_when_every_one_is_known() -> None:
    near = [
        GpuRow(index=0, numa_node=1),
        GpuRow(index=1, numa_node=0),
        GpuRow(index=2, numa_node=1),
    ]
    assert hostops.numa_mems(near) == "0-1"
    assert hostops.numa_mems(near[:1]) == "1"
    assert hostops.numa_mems([*near, GpuRow(index=3, numa_node=None)]) is None
    assert hostops.numa_mems([]) is None


def test_emulated_use_is_what_the_jobs_declare_capped_at_one_gpu() -> None:
    gpus = (HostGpu(0, "V100", 16384), HostGpu(1, "V100", 16384), HostGpu(2, "V100", 16384))
    node = Host(Target("h1", "x"), None, True, gpus, "s1")
    light = [_container("a", 1, "0", util="20"), _container("b", 2, "0", util="30")]
    heavy = [_container("c", 3, "1", util="80"), _container("d", 4, "1")]  # undeclared: 100
    frozen = [_container("e", 5, "2", util="90", paused=True)]
    got = attribute_emulated(node, light + heavy + frozen)
    assert got.source == "emulated"
    assert [(g.util_percent, g.jobs) for g in got.gpus] == [
        (50.0, (1, 2)),
        (100.0, (3, 4)),
        (0.0, (5,)),
    ]
    jobs = {j.job_id: j.util_percent for j in got.jobs}
    assert jobs == {1: 20.0, 2: 30.0, 3: 44.4, 4: 55.6, 5: 0.0}  # 80 and 100 share the 100 %
    assert all(j.emulated for j in got.jobs) and all(g.emulated for g in got.gpus)


def test_emulated_memory_is_the_declared_allocation_else_the_ask() -> None:
    gpus = (HostGpu(0, "V100", 16384), HostGpu(1, "V100", 16384))
    node = Host(Target("h1", "x"), None, True, gpus, "s1")
    over = _container("a", 1, "0,1", **{LABEL_GPU_MEM: "4000", LABEL_EMULATED_GPU_MEM: "6000"})
    asked = _container("b", 2, "0", **{LABEL_GPU_MEM: "3000"})
    got = attribute_emulated(node, [over, asked, _container("c", 3, "1")])
    jobs = {j.job_id: (j.memory_mb, j.memory_peak_mb) for j in got.jobs}
    assert jobs == {1: (12000, 6000), 2: (3000, 3000), 3: (None, None)}
    assert [g.memory_used_mb for g in got.gpus] == [9000, 6000]
    assert (over.gpu_mem_limit_mb, over.emulated_gpu_mem_mb, got.jobs[2].memory_peak_mb) == (
        4000,
        6000,
        None,
    )
