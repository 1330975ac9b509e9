"""``gctl daemon`` end to end on the test hosts: real containers, real SSH, real checkpoints.

The daemon runs in a thread of the test (the same :class:`Daemon` the
command runs) with short periods; the jobs are the test image's training
program, which checkpoints through the job SDK.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import testhosts
from clikit import run
from daemonkit import STORES, Running, job_file, jobs_of, submit, wait
from daemonkit import kinds as _kinds
from sqlalchemy import select

from gctl.services import db, jobs, nodes, specs, why
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import EventRow, NodeRow

pytestmark = pytest.mark.usefixtures("clean_hosts")


_STORE = STORES


def _submit(store: db.Store, *argv: str, gpus: int = 1, **extra: Any) -> int:
    return submit(store, *argv, gpus=gpus, **extra)


def _wait(what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
    wait(what, check, timeout, _STORE[-1] if _STORE else None)


def _job_file(hosts: dict[str, Any], node: str, job_id: int, name: str) -> str:
    return job_file(hosts, _STORE[-1], node, job_id, name)


def _starts(hosts: dict[str, Any], node: str, job_id: int) -> list[tuple[int, int]]:
    """``(attempt, step resumed at)`` of every start of the job on ``node``."""
    text = _job_file(hosts, node, job_id, "starts.log")
    return [(int(a), int(s)) for a, s in (line.split() for line in text.splitlines())]


def test_six_jobs_on_one_four_gpu_node_time_slice_and_all_finish(
    host_store4: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    nodes.set_admin_state(host_store4, "h2", "drain", "only h1 in this test")
    steps = 60
    ids = [_submit(host_store4, "--steps", str(steps), "--step-time", "0.05") for _ in range(6)]
    start_daemon(host_store4, policy_options={"quantum": 1.0, "migration": False})

    _wait(
        "all six on GPUs", lambda: all(j.state != "PENDING" for j in jobs_of(host_store4).values())
    )
    view = nodes.list_nodes(host_store4, ["h1"])[0]
    assert view.height == 1.5  # six 1-GPU jobs on 4 GPUs: nobody waits in the queue
    _wait(
        "all six completed",
        lambda: all(j.state == "COMPLETED" for j in jobs_of(host_store4).values()),
        timeout=120,
    )
    for job_id in ids:
        progress = _job_file(hosts, "h1", job_id, "progress.json")
        assert f'"step": {steps}' in progress
    frozen = [j for j in ids if "job.suspend" in _kinds(host_store4, j)]
    assert len(frozen) >= 2  # two jobs waited their turn frozen, then ran on
    assert all("job.resume" in _kinds(host_store4, j) for j in frozen)


def test_suspend_resume_and_migrate_continue_from_the_checkpoint(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    job = _submit(host_store, "--steps", "400", "--step-time", "0.05")
    start_daemon(host_store)
    _wait(
        "the job to run and be known to checkpoint",
        lambda: jobs_of(host_store)[job].mechanism == "checkpoint",
    )
    node = jobs.show_job(host_store, job).view.nodes[0]
    other = "h2" if node == "h1" else "h1"

    assert not jobs.act(host_store, job, "suspend").done  # recorded for the daemon
    _wait("suspended", lambda: jobs_of(host_store)[job].state == "SUSPENDED")
    row = jobs_of(host_store)[job]
    assert row.held and jobs.show_job(host_store, job).view.nodes == ()  # GPUs given back
    jobs.act(host_store, job, "resume")
    _wait("running again", lambda: jobs_of(host_store)[job].state == "RUNNING")
    _wait("reporting again", lambda: jobs_of(host_store)[job].attempt == 1)
    time.sleep(1.0)
    jobs.act(host_store, job, "migrate", to=other)
    _wait("moved", lambda: jobs.show_job(host_store, job).view.nodes == (other,))
    _wait("completed", lambda: jobs_of(host_store)[job].state == "COMPLETED", timeout=120)

    starts = _starts(hosts, node, job)
    assert starts[0] == (0, 0)
    moved = _starts(hosts, other, job)
    assert moved[-1][0] == 2 and moved[-1][1] > 0  # resumed on the other host, not from zero
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(starts))
    assert '"step": 400' in _job_file(hosts, other, job, "progress.json")
    kinds = _kinds(host_store, job)
    assert "job.suspend" in kinds and "job.migrate" in kinds


def test_a_node_that_stops_answering_is_marked_down_and_its_jobs_finish_elsewhere(
    host_store: db.Store,
    hosts: dict[str, Any],
    start_daemon: Callable[..., Running],
    tmp_path: Path,
) -> None:
    job = _submit(host_store, "--steps", "150", "--step-time", "0.05", "--checkpoint-every", "10")
    start_daemon(host_store, node_timeout=3.0)
    _wait("running", lambda: jobs_of(host_store)[job].state == "RUNNING")
    first = jobs.show_job(host_store, job).view.nodes[0]
    if first != "h1":
        pytest.fail(f"expected the first node to take the job, got {first}")
    _wait("a checkpoint", lambda: '"step": 2' in _job_file(hosts, "h1", job, "checkpoint.json"))
    mirror = tmp_path / "state" / "checkpoints" / store_id(host_store.engine) / str(job)
    _wait("the daemon's copy of it", lambda: any(mirror.glob("a*.tar")))
    testhosts.ssh_stop("h1")
    try:
        _wait("h1 down", lambda: nodes.show_node(host_store, "h1").state.startswith("down"))
        _wait("requeued onto h2", lambda: jobs.show_job(host_store, job).view.nodes == ("h2",))
        _wait("completed", lambda: jobs_of(host_store)[job].state == "COMPLETED", timeout=120)
    finally:
        testhosts.ssh_start("h1")
    row = jobs_of(host_store)[job]
    assert row.restarts == 1
    resumed = _starts(hosts, "h2", job)[-1]
    assert resumed[1] >= 10  # from the last checkpoint the daemon had, not from zero
    _wait("h1 back", lambda: nodes.show_node(host_store, "h1").state == "idle")
    with transaction(host_store.engine, write=False) as s:
        node = s.scalars(select(NodeRow).where(NodeRow.name == "h1")).one()
        assert node.reason is None


def test_an_elastic_job_grows_when_idle_and_shrinks_when_work_arrives(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    nodes.set_admin_state(host_store, "h2", "drain", "only h1 in this test")
    job = _submit(host_store, "--steps", "100000", "--step-time", "0.05", elastic="1:2")
    start_daemon(host_store, policy_options={"quantum": 1.0, "grow_idle_period": 1.0})
    _wait("grown to 2 GPUs", lambda: len(jobs.show_job(host_store, job).allocations) == 2)
    assert "job.grow" in _kinds(host_store, job)
    newcomer = _submit(host_store, "--steps", "20", "--step-time", "0.05")
    _wait("shrunk to 1 GPU", lambda: len(jobs.show_job(host_store, job).allocations) == 1)
    assert "job.shrink" in _kinds(host_store, job)
    _wait("the newcomer done", lambda: jobs_of(host_store)[newcomer].state == "COMPLETED")
    starts = _starts(hosts, "h1", job)
    assert [a for a, _ in starts] == [0, 1, 2]  # started, restarted grown, restarted shrunk
    assert starts[2][1] >= starts[1][1] > 0  # each restart from a checkpoint, never from zero
    jobs.act(host_store, job, "cancel")
    _wait("cancelled", lambda: jobs_of(host_store)[job].state == "CANCELLED")


def test_a_high_priority_job_is_never_suspended_for_normal_ones(
    host_store: db.Store, start_daemon: Callable[..., Running]
) -> None:
    nodes.set_admin_state(host_store, "h2", "drain", "only h1 in this test")
    high = _submit(host_store, "--steps", "60", "--step-time", "0.05", priority="high")
    normal = [_submit(host_store, "--steps", "30", "--step-time", "0.05") for _ in range(3)]
    start_daemon(host_store, policy_options={"quantum": 0.5})
    _wait(
        "all completed",
        lambda: all(j.state == "COMPLETED" for j in jobs_of(host_store).values()),
        timeout=120,
    )
    assert "job.suspend" not in _kinds(host_store, high)
    assert any("job.suspend" in _kinds(host_store, j) for j in normal)  # they took turns


def _light_looking_jobs(
    store: db.Store, *, steps: int, gpu_busy: float, count: int = 3
) -> list[int]:
    """1-GPU jobs showing 20 % utilisation, for h1 alone (2 GPUs): with 3, two must share."""
    nodes.set_admin_state(store, "h2", "drain", "only h1 in this test")
    argv = ["--steps", str(steps), "--step-time", "0.05", "--gpu-busy", str(gpu_busy)]
    return [_submit(store, *argv, env=["GCTL_EMULATED_UTIL=20"]) for _ in range(count)]


def _wait_all_reach(
    store: db.Store, hosts: dict[str, Any], ids: list[int], steps: int, timeout: float
) -> None:
    """Wait for every job to complete, then check each reached ``steps`` on h1."""
    _wait(
        "all completed",
        lambda: all(j.state == "COMPLETED" for j in jobs_of(store).values()),
        timeout=timeout,
    )
    for job_id in ids:
        assert f'"step": {steps}' in _job_file(hosts, "h1", job_id, "progress.json")


def _moved_into_packs(store: db.Store, ids: list[int]) -> list[int]:
    """The jobs packed by moving onto a job running alone."""
    return [j for j in ids if "job.pack" in _kinds(store, j)]


def _turn_packs(store: db.Store) -> list[str]:
    """The resume events of jobs that took their turn packed beside another."""
    with transaction(store.engine, write=False) as s:
        rows = s.scalars(select(EventRow).where(EventRow.kind == "job.resume")).all()
    return [e.message for e in rows if "packed with job" in e.message]


def test_light_jobs_are_packed_and_stay_packed_while_the_pack_pays(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    # Each job computes 20 % of every step on its emulated GPU: two on one GPU barely contend.
    # Round robin: the waiting job gets turns, so it is profiled before it is packed.
    ids = _light_looking_jobs(host_store, steps=240, gpu_busy=0.2)
    options = {"quantum": 1.0, "migration": False, "reconsider_every": 1.0, "order": "round-robin"}
    start_daemon(host_store, policy_options=options)

    # Packed either way: the waiting job moves onto the job alone (job.pack), or the
    # two on one GPU take their turn together in place (resumed "packed with job").
    _wait("a pack", lambda: bool(_moved_into_packs(host_store, ids) or _turn_packs(host_store)))
    _wait_all_reach(host_store, hosts, ids, 240, timeout=120)
    kinds = {j: _kinds(host_store, j) for j in ids}
    assert not any("job.unpack" in k for k in kinds.values()), kinds  # the pack paid throughout
    for packed in _moved_into_packs(host_store, ids):
        resumed = _starts(hosts, "h1", packed)
        assert len(resumed) >= 2 and resumed[-1][1] > 0  # moved onto the shared GPU at a checkpoint


def test_light_jobs_taking_turns_take_them_two_at_a_time(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    # Six light jobs on h1's two GPUs: three per GPU, nobody alone to pack onto. Round
    # robin: by least attained service the first of each GPU would run on, nobody taking turns.
    ids = _light_looking_jobs(host_store, steps=120, gpu_busy=0.2, count=6)
    options = {"quantum": 1.0, "migration": False, "order": "round-robin"}
    start_daemon(host_store, policy_options=options)

    _wait("a turn taken packed", lambda: bool(_turn_packs(host_store)))
    _wait_all_reach(host_store, hosts, ids, 120, timeout=150)
    assert not any("job.unpack" in _kinds(host_store, j) for j in ids)  # the pairs paid


def test_a_pack_that_loses_to_time_slicing_is_undone(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    # The jobs show 20 % but compute the whole step: packed, each runs at half speed or less.
    # 400 steps of 0.05 s: long enough that a loaded machine still measures the pack and
    # undoes it before the jobs end (200 were once too few in a full run).
    ids = _light_looking_jobs(host_store, steps=400, gpu_busy=1.0)
    # Time slicing gives a pair 1.0 at best; ask packing to beat it clearly.
    options = {"quantum": 1.0, "migration": False, "reconsider_every": 1.0}
    options["pack_keep_above"] = 1.25
    # Gandiva's packing by utilisation: the default prediction (0.6 each) would not even try it
    options["interference"] = False
    start_daemon(host_store, policy_options=options)

    _wait("a pack undone", lambda: any("job.unpack" in _kinds(host_store, j) for j in ids))
    with transaction(host_store.engine, write=False) as s:
        undone = s.scalars(select(EventRow).where(EventRow.kind == "job.unpack")).all()
    assert all("do not beat time slicing" in e.message for e in undone), [e.message for e in undone]
    _wait_all_reach(host_store, hosts, ids, 400, timeout=150)


def test_a_scattered_job_is_regrouped_after_a_big_job_finishes(
    host_store_of: Callable[[str], db.Store],
    hosts: dict[str, Any],
    start_daemon: Callable[..., Running],
) -> None:
    store = host_store_of("5xV100-16GB")
    big = _submit(store, "--steps", "60", "--step-time", "0.05", gpus=4)  # h1, 4 of 5 GPUs
    filler = _submit(store, "--steps", "100000", "--step-time", "0.05", gpus=4)  # h2, 4 of 5
    spread = _submit(store, "--steps", "100000", "--step-time", "0.05", gpus=2)  # 1 + 1
    start_daemon(store, policy_options={"reconsider_every": 1.0})
    _wait("the 2-GPU job spread over both", lambda: jobs_of(store)[spread].state == "RUNNING")
    assert sorted(jobs.show_job(store, spread).view.nodes) == ["h1", "h2"]
    _wait("the big job done", lambda: jobs_of(store)[big].state == "COMPLETED")
    _wait("regrouped on h1", lambda: jobs.show_job(store, spread).view.nodes == ("h1",))
    assert "job.migrate" in _kinds(store, spread)
    _wait("running again", lambda: jobs_of(store)[spread].state == "RUNNING")
    _wait("a restart on h1", lambda: len(_starts(hosts, "h1", spread)) >= 2)
    assert _starts(hosts, "h1", spread)[-1][1] > 0  # from its checkpoint, not from zero
    for job_id in (spread, filler):
        jobs.act(store, job_id, "cancel")
    _wait("cancelled", lambda: jobs_of(store)[spread].state == "CANCELLED")


def test_show_job_gives_measured_progress_with_the_sdk_and_an_estimate_without(
    host_store: db.Store, start_daemon: Callable[..., Running]
) -> None:
    sdk = _submit(host_store, "--steps", "100000", "--step-time", "0.05")
    plain = jobs.submit(
        host_store,
        [
            specs.build(
                image="gctl-test/train:1",
                command=["python3", "-c", "import time; time.sleep(600)"],
                gpus=1,
                env=["GCTL_EMULATED_UTIL=40"],
            )
        ],
    )[0]
    start_daemon(host_store)

    def progress(job_id: int) -> dict[str, Any] | None:
        found: dict[str, Any] | None = jobs.show_job(host_store, job_id).runtime["progress"]
        return found if found and found["rate"] > 0 else None

    def sdk_seen() -> bool:
        # Until the SDK's first report, the SDK job's rate is estimated from its utilisation too.
        found = progress(sdk)
        return found is not None and not found["estimated"]

    _wait("both sampled", lambda: sdk_seen() and progress(plain) is not None)
    measured, estimated = progress(sdk), progress(plain)
    assert measured is not None and estimated is not None
    assert not measured["estimated"] and measured["emulated"]
    # No SDK: the rate is the job's share of (emulated) GPU utilisation, 40 % declared.
    assert estimated["estimated"] and estimated["rate"] == pytest.approx(0.4)
    assert estimated["gpu_util"] == pytest.approx(0.4)
    code, shown, err = run("--db", host_store.url, "show", "job", str(plain))
    assert code == 0, err
    assert "Mechanism=freeze" in shown
    assert "Progress=0.40 (estimated from GPU utilisation: no job SDK seen)" in shown
    assert "GPUUtil=40% GPUMem=" in shown and "(emulated)" in shown


def test_jobs_that_do_not_fit_a_gpu_together_take_turns_checkpointed(
    host_store: db.Store, hosts: dict[str, Any], start_daemon: Callable[..., Running]
) -> None:
    # 10 GB each on 16 GB GPUs: frozen side by side they would not fit, so a job waiting
    # for its turn checkpoints and exits, and its turn restarts it from the checkpoint.
    nodes.set_admin_state(host_store, "h2", "drain", "only h1 in this test")
    argv = ["--steps", "120", "--step-time", "0.05"]
    first = [_submit(host_store, *argv, gpu_mem="10G") for _ in range(2)]
    options = {"quantum": 1.0, "checkpoint_quantum": 2.0, "migration": False}
    start_daemon(host_store, policy_options=options)
    _wait(
        "both running, known to checkpoint",
        lambda: all(
            (j.state, j.mechanism) == ("RUNNING", "checkpoint")
            for j in jobs_of(host_store).values()
        ),
    )
    third = _submit(host_store, *argv, gpu_mem="10G")
    ids = [*first, third]
    _wait(
        "all three completed",
        lambda: all(j.state == "COMPLETED" for j in jobs_of(host_store).values()),
        timeout=150,
    )
    with transaction(host_store.engine, write=False) as s:
        suspends = s.scalars(select(EventRow).where(EventRow.kind == "job.suspend")).all()
        placed = s.scalars(select(EventRow).where(EventRow.kind == "job.place")).all()
    assert suspends and {e.data.get("mechanism") for e in suspends} == {"checkpoint"}
    # The third job got its turn on a GPU in use, not the GPU a finished job left
    # (it used to wait for that: the job it displaced was handed its turn back at once).
    (third_placed,) = [e for e in placed if e.job_id == third]
    assert "time-slicing" in third_placed.message, third_placed.message
    for job_id in ids:
        assert '"step": 120' in _job_file(hosts, "h1", job_id, "progress.json")
    waited = {e.job_id for e in suspends if e.job_id is not None}
    for job_id in waited:
        starts = _starts(hosts, "h1", job_id)
        assert len(starts) >= 2 and starts[-1][1] > 0  # restarted from its checkpoint


def test_least_attained_service_runs_a_new_short_job_through_and_why_tells_the_level(
    host_store: db.Store, start_daemon: Callable[..., Running]
) -> None:
    """Two long jobs hold h1's 2 GPUs past the first level; a short one arrives.

    Round robin would hand the GPUs back and forth every 0.5 s quantum; by
    least attained service the newcomer (level 1) keeps its GPU until it is
    done, then the job it displaced resumes, and ``gctl why`` gives its level.
    """
    nodes.set_admin_state(host_store, "h2", "drain", "only h1 in this test")
    long = [_submit(host_store, "--steps", "300", "--step-time", "0.05") for _ in range(2)]
    options = {"quantum": 0.5, "level_base": 3.0, "migration": False, "packing": False}
    start_daemon(host_store, policy_options=options)
    _wait("both running", lambda: all(jobs_of(host_store)[j].state == "RUNNING" for j in long))
    time.sleep(4.0)  # both past 3 GPU-seconds: level 2 of 3
    short = _submit(host_store, "--steps", "30", "--step-time", "0.05")
    _wait("the short job done", lambda: jobs_of(host_store)[short].state == "COMPLETED")
    assert "job.suspend" not in _kinds(host_store, short)  # never made to take turns
    assert not all(jobs_of(host_store)[j].state == "COMPLETED" for j in long)
    displaced = [j for j in long if "job.suspend" in _kinds(host_store, j)]
    assert len(displaced) == 1
    _wait("the displaced job back", lambda: jobs_of(host_store)[displaced[0]].state == "RUNNING")
    reason = why.explain(host_store, displaced[0]).reason or ""
    assert "level 2 of 3" in reason and "GPU-hours attained" in reason, reason
    _wait(
        "all completed",
        lambda: all(j.state == "COMPLETED" for j in jobs_of(host_store).values()),
        timeout=120,
    )
