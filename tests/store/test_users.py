"""Many users on one cluster, with real OS users (issue 18): who may do what, and secrets.

Two plain users and an operator (:mod:`userkit`) run gctl as themselves. On
SQLite the store file is the boundary: private to operators. On PostgreSQL
each connects as the role of their login, and row-level security holds the
rules even against SQL sent without gctl.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import create_engine, make_url, text
from userkit import ALICE, BOB, CAROL, as_user, open_to_all, os_users

from gctl.services import db


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, int]]:
    with os_users() as made:
        yield made


def _url_as(pg_url: str, role: str) -> str:
    return make_url(pg_url).set(username=role).render_as_string(hide_password=False)


@pytest.fixture
def pg_store(pg_url: str, users: dict[str, int]) -> str:
    """A store on PostgreSQL (made by its owner) with a role for each user."""
    db.upgrade(db.connect(pg_url))
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name, group in ((ALICE, "gctl_user"), (BOB, "gctl_user"), (CAROL, "gctl_operator")):
            exists = conn.scalar(text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name})
            if not exists:
                conn.execute(text(f"CREATE ROLE {name} LOGIN IN ROLE {group}"))
    admin.dispose()
    return pg_url


def test_a_sqlite_store_is_private_to_operators(
    tmp_path: Path, users: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    open_to_all(tmp_path)
    store = tmp_path / "gctl.db"
    monkeypatch.setenv("GCTL_CONFIG", str(tmp_path / "none.toml"))
    os.umask(0o000)  # whatever the umask
    try:
        db.upgrade(db.connect(str(store)))
    finally:
        os.umask(0o022)
    mode = stat.S_IMODE(store.stat().st_mode)
    assert mode == 0o660 and store.stat().st_gid == _gid("gctl-admin")  # the admin group's
    refused = as_user(ALICE, "--db", str(store), "queue")
    assert refused.code == 1 and refused.err.count("\n") == 1, refused
    assert "Traceback" not in refused.err
    carol = as_user(CAROL, "--db", str(store), "queue")  # an operator by group
    assert carol.code == 0, carol


def _gid(group: str) -> int:
    import grp

    return grp.getgrnam(group).gr_gid


def test_the_user_comes_from_the_system_not_the_environment(
    pg_store: str, users: dict[str, int]
) -> None:
    alice = _url_as(pg_store, ALICE)
    spoof = as_user(
        ALICE, "--db", alice, "submit", "--image", "i", "--", "t", env={"GCTL_USER": BOB}
    )
    assert spoof.code == 1 and "honoured only for operators" in spoof.err, spoof
    for lie in ({"USER": BOB}, {"LOGNAME": BOB}):
        ran = as_user(
            ALICE, "--db", alice, "submit", "--parsable", "--image", "i", "--", "t", env=lie
        )
        assert ran.code == 0, ran
        job = json.loads(
            as_user(ALICE, "--db", alice, "show", "job", ran.out.strip(), "--json").out
        )
        assert job["user"] == ALICE


def test_users_act_on_their_own_jobs_and_operators_on_all(
    pg_store: str, users: dict[str, int]
) -> None:
    alice, bob, carol = (_url_as(pg_store, u) for u in (ALICE, BOB, CAROL))
    ran = as_user(
        ALICE, "--db", alice, "submit", "--parsable", "--image", "i",
        "--env", "WANDB_API_KEY=secret123", "--", "t",
    )  # fmt: skip
    assert ran.code == 0, ran
    job = ran.out.strip()
    for action in (("cancel", job), ("hold", job), ("suspend", job)):
        refused = as_user(BOB, "--db", bob, *action)
        assert refused.code == 1 and f"job {job} is {ALICE}'s" in refused.err, refused
    assert as_user(ALICE, "--db", alice, "hold", job).code == 0
    assert as_user(ALICE, "--db", alice, "release", job).code == 0
    shown = json.loads(as_user(BOB, "--db", bob, "show", "job", job, "--json").out)
    assert shown["spec"]["env"] == {"WANDB_API_KEY": "(hidden)"}  # another's secrets
    own = json.loads(as_user(ALICE, "--db", alice, "show", "job", job, "--json").out)
    assert own["spec"]["env"] == {"WANDB_API_KEY": "secret123"}
    high = as_user(ALICE, "--db", alice, "submit", "--priority", "high", "--image", "i", "--", "t")
    assert high.code == 1 and "may ask for normal at most" in high.err, high
    rekey = ("node", "rekey", "gpu01", "--host-key-fingerprint", "SHA256:" + "B" * 43)
    for node_cmd in (("node", "drain", "gpu01", "--reason", "x"), rekey, ("daemon",), ("defrag",)):
        refused = as_user(BOB, "--db", bob, *node_cmd)
        assert refused.code == 1 and "is for operators" in refused.err, (node_cmd, refused)
    assert as_user(CAROL, "--db", carol, "cancel", job).code == 0  # an operator


def test_a_users_own_sql_cannot_change_another_users_job(
    pg_store: str, users: dict[str, int]
) -> None:
    """Row-level security, without gctl in between."""
    ran = as_user(
        ALICE, "--db", _url_as(pg_store, ALICE), "submit", "--parsable", "--image", "i", "--", "t"
    )
    job = int(ran.out)
    bob = create_engine(_url_as(pg_store, BOB))
    with bob.begin() as conn:
        changed = conn.execute(
            text("UPDATE jobs SET state = 'CANCELLED' WHERE id = :j"), {"j": job}
        )
        assert changed.rowcount == 0  # not his to see for writing
        with pytest.raises(sa.exc.ProgrammingError, match="row-level security"):
            conn.execute(
                text(
                    'INSERT INTO jobs (name, "user", image, command, env, mounts, gpus, priority,'
                    " job_class, datasets, state, held, submit_time, restarts, attempt,"
                    " start_failures, stalls) VALUES ('x', :u, 'i', '[]', '{}', '[]', 1, 'normal',"
                    " 'production', '[]', 'PENDING', false, 0, 0, 0, 0, 0)"
                ),
                {"u": ALICE},
            )
    with bob.begin() as conn, pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
        conn.execute(text("UPDATE nodes SET admin_state = 'down'"))
    alice = create_engine(_url_as(pg_store, ALICE))
    with alice.begin() as conn, pytest.raises(sa.exc.ProgrammingError, match="row-level security"):
        conn.execute(text("UPDATE jobs SET priority = 'high' WHERE id = :j"), {"j": job})
    with db.connect(pg_store).engine.connect() as conn:
        state = conn.scalar(text("SELECT state FROM jobs WHERE id = :j"), {"j": job})
    assert state == "PENDING"
    bob.dispose()
    alice.dispose()


def test_kept_output_is_read_by_its_owner_and_operators_only(
    pg_store: str, users: dict[str, int]
) -> None:
    """A job's output may hold its secrets: the store's tail follows the env's rule."""
    ran = as_user(
        ALICE, "--db", _url_as(pg_store, ALICE), "submit", "--parsable", "--image", "i", "--", "t"
    )
    job = int(ran.out)
    with db.connect(pg_store).engine.begin() as conn:  # as the daemon keeps it
        conn.execute(
            text(
                "INSERT INTO job_outputs (job_id, attempt, node, path, bytes, tail, saved_at)"
                " VALUES (:j, 0, 'gpu01', '/w/output-a0.log', 12, 'token=s3cret', 0)"
            ),
            {"j": job},
        )
    for role, seen in ((ALICE, ["token=s3cret"]), (BOB, []), (CAROL, ["token=s3cret"])):
        engine = create_engine(_url_as(pg_store, role))
        with engine.begin() as conn:
            tails = list(conn.scalars(text("SELECT tail FROM job_outputs")))
        engine.dispose()
        assert tails == seen, role
    bob = create_engine(_url_as(pg_store, BOB))
    with bob.begin() as conn, pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
        conn.execute(
            text(
                "INSERT INTO job_outputs (job_id, attempt, node, path, bytes, tail, saved_at)"
                " VALUES (:j, 1, 'gpu01', '/x', 1, 'forged', 0)"
            ),
            {"j": job},
        )
    bob.dispose()
