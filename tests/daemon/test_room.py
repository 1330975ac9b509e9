"""A due periodic step waits for a tick with room for it, a bounded number of ticks."""

from __future__ import annotations

from gctl.daemon.room import PUT_OFF_TICKS, Room


def _measured(tick: float = 1.0) -> Room:
    room = Room(tick)
    room.note({"reactive": 0.56, "introspect": 0.5, "balance": 0.05, "look": 0.1})
    return room


def test_a_step_not_due_never_runs() -> None:
    assert not Room(1.0).allows(-0.1, 60.0, 0.0, "introspect")


def test_a_step_never_measured_runs_when_due() -> None:
    assert Room(1.0).allows(0.0, 60.0, 0.9, "introspect", "balance")


def test_a_due_step_that_fits_runs() -> None:
    assert _measured().allows(0.0, 60.0, 0.3, "introspect", "balance")


def test_a_due_step_that_would_overrun_a_busy_tick_waits() -> None:
    room = _measured()
    assert not room.allows(0.0, 60.0, 0.6, "introspect", "balance")
    assert not room.allows(PUT_OFF_TICKS - 1.0, 60.0, 0.6, "introspect", "balance")
    # the reconcile comes before the reactive pass: that pass's last duration counts too
    room.note({"reconcile": 0.5})
    assert not room.allows(0.0, 30.0, 0.1, "reconcile", "reactive")
    assert room.allows(0.0, 30.0, 0.1, "reconcile")


def test_a_step_put_off_long_enough_runs_however_full_the_tick() -> None:
    assert _measured().allows(PUT_OFF_TICKS * 1.0, 60.0, 0.9, "introspect", "balance")


def test_a_short_period_bounds_the_wait_to_half_of_it() -> None:
    room = _measured(tick=0.3)
    assert not room.allows(0.4, 1.0, 0.3, "introspect")
    assert room.allows(0.5, 1.0, 0.3, "introspect")


def test_the_latest_duration_of_a_step_is_the_one_expected() -> None:
    room = _measured()
    assert not room.allows(0.0, 60.0, 0.6, "introspect")
    room.note({"introspect": 0.2})
    assert room.allows(0.0, 60.0, 0.6, "introspect")


def test_a_pass_stops_waiting_for_hosts_inside_its_tick() -> None:
    began = 100.0
    assert began < Room(2.0).waits_until(began) < began + 2.0
