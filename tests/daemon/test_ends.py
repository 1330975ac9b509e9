"""How a run ended, judged on evidence: completed, failed, or interrupted (issue 17, item 1)."""

from __future__ import annotations

from gctl.daemon.ends import judge
from gctl.daemon.jobfiles import Report
from gctl.hosts.engine import ContainerState

BOOT = 1_700_000_000.0


def _ended(
    code: int, *, oom: bool = False, started: str = "", finished: str = ""
) -> ContainerState:
    return ContainerState(
        id="c",
        name="gctl-s-1-0",
        status="exited",
        running=False,
        paused=False,
        exit_code=code,
        oom_killed=oom,
        error=None,
        labels={},
        started_at="2026-11-25T10:00:00.123456789Z",
        finished_at=finished or "2026-11-25T10:05:00.5Z",
    )


def _report(step: int, steps: int | None = 100, *, done: bool = False) -> Report:
    progress: dict[str, object] = {"step": step, "steps": steps, "sdk": 1}
    if done:
        progress["done"] = True
    return Report(progress, step, 1.0)


def test_an_sdk_job_that_exits_0_before_its_last_step_was_interrupted() -> None:
    """The engine's SIGTERM made the job checkpoint and exit 0 at step 81 of 3000."""
    ending = judge([_ended(0)], _report(81, 3000), sdk=True)
    assert ending.interrupted and ending.state == "PENDING"
    assert "before the job SDK's final report" in ending.why


def test_an_sdk_job_is_completed_by_its_final_report_or_its_last_step() -> None:
    assert judge([_ended(0)], _report(100, 100), sdk=True).state == "COMPLETED"
    assert judge([_ended(0)], _report(7, None, done=True), sdk=True).state == "COMPLETED"
    assert judge([_ended(0)], None, sdk=True).interrupted  # no report read: no evidence


def test_a_job_without_the_sdk_has_only_its_exit_status() -> None:
    assert judge([_ended(0)], None, sdk=False).state == "COMPLETED"
    failed = judge([_ended(3)], None, sdk=False)
    assert (failed.state, failed.why, failed.exit_code) == ("FAILED", "exit 3", 3)


def test_a_signal_gctl_did_not_send_is_an_interruption_and_an_oom_kill_a_failure() -> None:
    killed = judge([_ended(137)], None, sdk=False)
    assert killed.interrupted and "SIGKILL that gctl did not send" in killed.why
    assert judge([_ended(143)], None, sdk=False).interrupted  # SIGTERM of a stopping engine
    oom = judge([_ended(137, oom=True)], None, sdk=False)
    assert (oom.state, oom.why) == ("FAILED", "out of memory (OOM kill)")


def test_an_end_caused_by_a_reboot_or_an_engine_restart_is_an_interruption() -> None:
    """Whatever the exit status: the host or the engine stopped the job."""
    at = "2026-11-25T10:05:00Z"
    engine_start = 1795601101.0  # 10:05:01 that day: the engine came back a second later
    restarted = judge([_ended(0, finished=at)], None, sdk=False, engine=engine_start)
    assert restarted.interrupted and "Docker engine restarted" in restarted.why
    lost = judge([_ended(255, finished=at)], None, sdk=False, boot=engine_start + 60)
    assert lost.interrupted and "rebooted" in lost.why
    # an engine restarted long before the job started is no cause
    assert judge([_ended(0)], None, sdk=False, engine=BOOT).state == "COMPLETED"
    # nor one the job outlived (a live-restored engine): it ended on its own later
    lived = _ended(0, finished="2026-11-25T11:00:00Z")
    assert judge([lived], None, sdk=False, engine=engine_start).state == "COMPLETED"


def test_a_multi_node_run_fails_with_the_first_non_zero_status() -> None:
    ending = judge([_ended(0), _ended(2), _ended(5)], None, sdk=False)
    assert (ending.state, ending.exit_code) == ("FAILED", 2)


def test_the_fraction_done_is_the_sdk_step_over_its_total_when_it_reports_one() -> None:
    assert Report({"step": 30, "steps": 120}, None, None).done == 0.25
    assert Report({"step": 130, "steps": 120}, None, None).done == 1.0
    assert Report({"step": 30}, None, None).done is None  # no total: unknown
    assert Report({"step": 30, "steps": 0}, None, None).done is None
    assert Report({"step": "30", "steps": 120}, None, None).done is None
    assert Report(None, 5, 1.0).done is None
