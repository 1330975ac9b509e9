"""What a job container is asked to be, checked without an engine."""

from __future__ import annotations

import docker.errors
import requests

from gctl.hosts.engine import ContainerSpec, host_config, refused_for_good
from gctl.hosts.mounts import Mount
from gctl.hosts.ssh import command_line


def _spec(**kw: object) -> ContainerSpec:
    base: dict[str, object] = {
        "job_id": 7, "attempt": 2, "node": "gpu01", "store_id": "5t0re", "image": "train:1",
        "command": ("python", "t.py"), "gpu_indices": (2, 3),
        "gpu_uuids": ("GPU-aaaa", "GPU-bbbb"), "job_dir": "/var/lib/gctl/jobs/7",
    }  # fmt: skip
    return ContainerSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_real_gpus_are_requested_by_uuid_from_the_nvidia_runtime() -> None:
    mounts = (Mount("/data", "/data", True),)
    cfg = host_config(_spec(cpuset="0-15", cpuset_mems="0", mounts=mounts), "1.41")
    assert cfg["DeviceRequests"] == [
        {"Driver": "nvidia", "Count": 0, "DeviceIDs": ["GPU-aaaa", "GPU-bbbb"],
         "Capabilities": [["gpu"]], "Options": {}}
    ]  # fmt: skip
    assert sorted(cfg["Binds"]) == ["/data:/data:ro", "/var/lib/gctl/jobs/7:/gctl:rw"]
    assert (cfg["CpusetCpus"], cfg["CpusetMems"], cfg["NetworkMode"]) == ("0-15", "0", "host")
    assert "CpusetMems" not in host_config(_spec(), "1.41")  # NUMA unknown: any memory


def test_emulated_gpus_request_no_device_but_get_the_same_env_and_labels() -> None:
    spec = _spec(emulated=True, env={"GCTL_NODE": "spoofed", "LR": "0.1"}, gpu_mem_mb=8000)
    assert spec.environment()["GCTL_GPU_MEM_MB"] == "8000"  # the SDK hands it to the framework
    assert host_config(spec, "1.41").get("DeviceRequests") in (None, [])
    env = spec.environment()
    assert env["GCTL_NODE"] == "gpu01" and env["LR"] == "0.1"  # gctl's keys win
    assert (env["GCTL_GPUS"], env["GCTL_GPU_UUIDS"], env["GCTL_EMULATED_GPUS"]) == (
        "2",
        "GPU-aaaa,GPU-bbbb",
        "1",
    )
    assert spec.labels() == {
        "gctl.store": "5t0re", "gctl.epoch": "0",
        "gctl.job": "7", "gctl.attempt": "2", "gctl.node": "gpu01", "gctl.gpus": "2,3",
        "gctl.gpu-uuids": "GPU-aaaa,GPU-bbbb", "gctl.emulated": "1", "gctl.gpu-mem-mb": "8000",
    }  # fmt: skip
    assert spec.name == "gctl-5t0re-7-2-gpu01"  # two stores, or two nodes, on one engine
    declared = _spec(emulated=True, env={"GCTL_EMULATED_GPU_MEM": "6000"}, gpu_mem_mb=4000)
    assert declared.labels()["gctl.emulated-gpu-mem-mb"] == "6000"
    assert "gctl.emulated-gpu-mem-mb" not in _spec(env={"GCTL_EMULATED_GPU_MEM": "6000"}).labels()


def test_remote_command_lines_quote_every_argument() -> None:
    line = command_line(["printf", "%s", "$(id)", "a b", "it's", ""])
    assert line == "printf %s '$(id)' 'a b' 'it'\"'\"'s' ''"


def _api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("engine error", response=response, explanation=explanation)


def test_a_start_refused_for_good_is_told_from_a_passing_engine_error() -> None:
    """A job whose command cannot run is held; an engine's own hiccup is only tried again."""
    never = (
        "failed to create shim task: OCI runtime create failed: runc create failed: unable to"
        ' start container process: exec: "/no/such/program": stat /no/such/program: no such'
        " file or directory: unknown"
    )
    passing = (
        "failed to update store for object type *libnetwork.endpoint: open : no such file or"
        " directory"  # seen right after an engine restart
    )
    assert refused_for_good(_api_error(500, never))
    assert not refused_for_good(_api_error(500, passing))
    assert refused_for_good(_api_error(400, "invalid mount config"))
    assert not refused_for_good(_api_error(500, "context deadline exceeded"))
