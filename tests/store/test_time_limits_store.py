"""Time limits in the store, on SQLite and PostgreSQL: kept at submit, counted over running time."""

from __future__ import annotations

from sqlalchemy import insert
from storekit import node, on_gpus, req

from gctl.daemon import timelimits
from gctl.services import db, jobs, queue
from gctl.store.engine import transaction
from gctl.store.models import JobStateRow

T = 1_800_000_000.0


def test_a_limit_is_stored_listed_and_counted_over_running_stretches_only(
    store: db.Store,
) -> None:
    node(store, "n1")
    limited, other, unlimited = jobs.submit(
        store, [req(time="0:20"), req(time="1:00"), req(time="UNLIMITED")]
    )
    listed = queue.queue(store)
    assert listed.time_limit == [20.0, 60.0, None]
    picked = queue.queue(store, ids={unlimited, limited})  # squeue -j
    assert (picked.id, picked.job_class) == ([limited, unlimited], ["production"] * 2)
    assert picked.sorted_by("l", T).id == [limited, unlimited]  # no limit: the longest
    assert picked.sorted_by("-l", T).id == [unlimited, limited]
    assert jobs.show_job(store, limited).spec["time_limit"] == 20.0
    on_gpus(store, limited, "n1", [0], since=T)
    on_gpus(store, other, "n1", [1], since=T)
    on_gpus(store, unlimited, "n1", [2], since=T)
    with transaction(store.engine, write=True) as s:  # 15 s of a turn suspended, then back
        s.execute(
            insert(JobStateRow),
            [
                {"job_id": limited, "state": "SUSPENDED", "at": T + 10, "reason": "turn"},
                {"job_id": limited, "state": "RUNNING", "at": T + 25, "reason": "turn"},
            ],
        )
    assert timelimits.expired(store, T + 34) == []  # ran 10 + 9 s
    due = timelimits.expired(store, T + 35)
    assert [(d.job_id, d.ran) for d in due] == [(limited, 20.0)]
    assert due[0].reason == "time limit 00:00:20 reached"
    assert [d.job_id for d in timelimits.expired(store, T + 60)] == [limited, other]
    assert timelimits.expired(store, T + 60, busy=[limited, other]) == []  # work in flight
