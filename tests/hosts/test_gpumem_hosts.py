"""GPU memory as an enforced limit on the test hosts (emulated GPUs, the daemon's default periods).

On emulated GPUs a job's memory is the allocation its ``GCTL_EMULATED_GPU_MEM``
declares: here one job declares more than its ``--gpu-mem``, one less. The
daemon runs with its default heartbeat (5 s) and grace (2 s), so the time to
stop is what a site gets out of the box.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from daemonkit import Running, jobs_of, kinds, submit, wait

from gctl.hosts.engine import container_name
from gctl.services import db
from gctl.store.identity import store_id

pytestmark = pytest.mark.usefixtures("clean_hosts")


def test_a_job_over_its_gpu_memory_limit_is_stopped_and_one_within_it_is_never_touched(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    steps = ("--steps", "200", "--step-time", "0.1")
    over = submit(host_store, *steps, gpu_mem="4G", env=["GCTL_EMULATED_GPU_MEM=6000"])
    within = submit(host_store, *steps, gpu_mem="4G", env=["GCTL_EMULATED_GPU_MEM=3000"])
    start_daemon(host_store, heartbeat_every=5.0)

    def state(job: int) -> str:
        return jobs_of(host_store)[job].state

    wait("both running", lambda: state(over) == state(within) == "RUNNING", store=host_store)
    took = wait("the job over its limit stopped", lambda: state(over) != "RUNNING", timeout=30)
    row = jobs_of(host_store)[over]
    print(f"job over its GPU memory limit stopped {took:.1f} s after it was seen running")
    assert row.state == "FAILED", row.reason
    assert row.reason == "GPU memory limit exceeded: used 6000 MiB of 4096 MiB"
    assert took <= 10.0
    sid = store_id(host_store.engine)
    docker = {h["name"]: h["docker_host"] for h in hosts["hosts"]}

    def gone() -> bool:
        listed = [
            subprocess.run(
                ["docker", "-H", url, "ps", "-aq", "--filter", f"name=^{name}$"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            for node, url in docker.items()
            for name in [container_name(sid, over, row.attempt, node)]
        ]
        return not any(listed)

    wait("its container removed", gone, timeout=30)
    time.sleep(3.0)  # more looks at the job within its limit
    assert state(within) == "RUNNING"
    wait("the job within its limit done", lambda: state(within) == "COMPLETED", timeout=120)
    assert "job.interrupt" not in kinds(host_store, within)
