"""Small builders shared by the core scheduler tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from gctl.core.decisions import Decision, Place
from gctl.core.model import GPU, Cluster, GpuRef, JobSpec, Node, Observed, ShareMode
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState, JobState

T = TypeVar("T")


def gandiva(**options: Any) -> GandivaPolicy:
    """A round-robin Gandiva policy that reconsiders placements on every introspective pass.

    Mechanism tests drive ``introspect`` at hand-picked times; a throttle on
    the slower passes (``reconsider_every``) would hide what they test.
    Round robin (not the default least-attained-service order) keeps turns
    predictable; the tests of that order ask for it (``order="las"``).
    """
    options.setdefault("reconsider_every", 0.0)
    options.setdefault("order", "round-robin")
    return GandivaPolicy(**options)


def pcie_node(name: str, size: int = 8) -> Node:
    """A PCIe node: 4 GPUs per socket, 2 per PCIe switch."""
    return Node(name, tuple(GPU(j, socket=j // 4, pcie_switch=j // 2) for j in range(size)))


def cluster(*sizes: int) -> Cluster:
    """Nodes n0, n1, ... with the given GPU counts."""
    return Cluster(tuple(pcie_node(f"n{i}", s) for i, s in enumerate(sizes)))


def new_state(*sizes: int) -> ClusterState:
    return ClusterState(cluster(*sizes))


def submit(state: ClusterState, job_id: str, gpus: int, now: float = 0.0, **kw: Any) -> JobState:
    return state.submit(JobSpec(job_id, gpus, submit_time=now, **kw), now)


def put(
    state: ClusterState,
    job_id: str,
    node: str,
    indices: Iterable[int],
    now: float = 0.0,
    **kw: Any,
) -> JobState:
    """Submit a job and commit it exclusively onto exact GPUs (scenario set-up)."""
    idx = tuple(indices)
    js = submit(state, job_id, len(idx), now, **kw)
    gpus: tuple[GpuRef, ...] = tuple((node, i) for i in idx)
    state.apply(Place(job_id, gpus, ShareMode.EXCLUSIVE, "test set-up"), now)
    return js


def observe(
    state: ClusterState,
    job_id: str,
    at: float,
    util: float = 0.5,
    mem: int = 1000,
    rate: float = 10.0,
    since: float | None = None,
) -> None:
    state.observe(job_id, Observed(at, util, mem, rate, since))


def of_type(decisions: Sequence[Decision], kind: type[T]) -> list[T]:
    return [d for d in decisions if isinstance(d, kind)]


def nodes_of(state: ClusterState, job_id: str) -> set[str]:
    return {n for n, _ in state.jobs[job_id].gpus}
