"""A node's outage as its two events: ``node.down`` when it is marked down, ``node.up`` after."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from sqlalchemy import select
from storekit import node

from gctl.daemon.health import Heartbeat
from gctl.daemon.site import Site
from gctl.daemon.watch import Observation
from gctl.services import db
from gctl.store.engine import transaction
from gctl.store.models import EventRow


def _said(store: db.Store) -> list[tuple[str, str]]:
    with transaction(store.engine, write=False) as s:
        rows = s.execute(select(EventRow.kind, EventRow.message).where(EventRow.node == "a1"))
        return [(kind, text) for kind, text in rows if kind != "node.add"]


def test_a_host_that_hung_says_how_long_once_its_hung_look_answers(store: db.Store) -> None:
    """A frozen host's look hangs, never fails, and answers once it thaws.

    The outage was measured to when that look began, so ``node.up`` said
    "after 0s not responding (0 failed looks)" after 40 s (stop 49, run O).
    """
    node(store, "a1")
    site = cast(Site, SimpleNamespace(store=store))
    beat = Heartbeat(timeout=20.0, answer_within=3.0)
    began = 1000.0  # the look that hangs
    for at in (1004.0, 1010.0, 1024.0):  # overdue since it began
        beat.record(site, [], {"a1": at - began}, at)
    answered = Observation("a1", began, 1, True)
    beat.record(site, [answered], {}, 1040.5)
    said = _said(store)
    assert [kind for kind, _ in said] == ["node.down", "node.up"]
    assert said[1][1] == "node a1 answers again after 40s not responding (0 failed looks)"
