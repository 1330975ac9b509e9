"""Time slicing within GPU memory: frozen jobs keep theirs, checkpointed ones give it back."""

from __future__ import annotations

from corekit import gandiva, new_state, observe, of_type, put, submit

from gctl.core import memory
from gctl.core.decisions import Place, Queue, Resume, Suspend
from gctl.core.model import JobStatus


def test_jobs_that_fit_together_are_frozen_to_take_turns() -> None:
    state = new_state(1)  # one 16 GB GPU
    policy = gandiva(quantum=60.0, checkpoint_quantum=300.0)
    put(state, "a", "n0", (0,), gpu_mem_mb=8000)
    submit(state, "b", 1, 10.0, gpu_mem_mb=8000)
    out = policy.schedule(state, 10.0)
    assert of_type(out, Suspend) == [Suspend("a", "time slice handed to new job b", False)]
    out = policy.introspect(state, 70.0)  # the plain quantum
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "b"), (Resume, "a")]
    assert of_type(out, Suspend)[0].checkpoint is False


def test_jobs_that_do_not_fit_wait_checkpointed_with_longer_turns() -> None:
    state = new_state(1)
    policy = gandiva(quantum=60.0, checkpoint_quantum=300.0)
    put(state, "a", "n0", (0,), gpu_mem_mb=6000)
    observe(state, "a", 5.0, mem=9000)  # seen using more than it asked for
    submit(state, "b", 1, 10.0, gpu_mem_mb=8000)
    out = policy.schedule(state, 10.0)
    assert of_type(out, Suspend) == [Suspend("a", "time slice handed to new job b", True)]
    assert state.jobs["b"].status is JobStatus.RUNNING
    assert policy.introspect(state, 70.0) == []  # not after the plain quantum
    out = policy.introspect(state, 310.0)
    assert [(type(d), d.job_id) for d in out] == [(Suspend, "b"), (Resume, "a")]
    suspend = of_type(out, Suspend)[0]
    assert suspend.checkpoint and suspend.reason.startswith("quantum 300s used")


def test_a_job_that_cannot_checkpoint_never_shares_beyond_memory() -> None:
    state = new_state(1, 1)
    policy = gandiva()
    put(state, "a", "n0", (0,), gpu_mem_mb=12000, can_checkpoint=False)
    put(state, "b", "n1", (0,), gpu_mem_mb=3000)
    submit(state, "c", 1, 10.0, gpu_mem_mb=8000)
    out = policy.schedule(state, 10.0)
    # n0 would need 12 GB frozen + 8 GB running; n1 takes it, b waiting frozen (3 + 8 GB).
    [place] = of_type(out, Place)
    assert place.job_id == "c" and place.gpus == (("n1", 0),)
    assert of_type(out, Suspend) == [Suspend("b", "time slice handed to new job c", False)]
    submit(state, "d", 1, 20.0, gpu_mem_mb=14000, can_checkpoint=False)
    out = policy.schedule(state, 20.0)
    assert [type(d) for d in out] == [Queue]  # nowhere to take turns within memory


def test_memory_rules() -> None:
    state = new_state(1)
    a = put(state, "a", "n0", (0,), gpu_mem_mb=10000, can_checkpoint=False)
    b = submit(state, "b", 1, gpu_mem_mb=6000)
    c = submit(state, "c", 1, gpu_mem_mb=7000)
    key = a.gpus
    assert memory.gpu_mem(state, key) == 16384
    assert memory.all_frozen_fit(state, key, [a, b])  # 16,000 MB
    assert not memory.all_frozen_fit(state, key, [a, b, c])
    assert not memory.can_take_turns(state, key, [a, b, c])  # 10 GB frozen + 7 GB running
    c2 = submit(state, "c2", 1, gpu_mem_mb=6000)
    assert memory.can_take_turns(state, key, [a, b, c2])  # 10 GB frozen + 6 GB running
    unknown = submit(state, "u", 1)
    assert memory.job_mem(unknown) == 0  # not profiled, nothing asked: assumed to fit


def test_a_jobs_limit_is_counted_while_it_uses_less_and_its_use_when_above() -> None:
    state = new_state(1)
    limited = put(state, "l", "n0", (0,), gpu_mem_mb=8000)
    observe(state, "l", 1.0, util=0.5, mem=2000)
    assert memory.job_mem(limited) == 8000  # it may grow to 8 GB: a partner gets the rest
    observe(state, "l", 2.0, util=0.5, mem=9000)
    assert memory.job_mem(limited) == 9000  # above it, until the daemon stops it
    free = put(state, "f", "n0", (0,))
    observe(state, "f", 1.0, util=0.5, mem=3000)
    assert memory.job_mem(free) == 3000  # no limit: what it uses
    half = submit(state, "h", 1, gpu_mem_mb=8000)
    assert memory.all_frozen_fit(
        state, limited.gpus, [half, submit(state, "h2", 1, gpu_mem_mb=8000)]
    )
    assert not memory.all_frozen_fit(state, limited.gpus, [half, limited])  # 8 + 9 GB > 16 GB
