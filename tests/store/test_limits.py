"""One rule for both backends: input PostgreSQL could not hold is refused by gctl, the same way."""

from __future__ import annotations

import pytest
from clikit import ok, run
from storekit import node

from gctl.services import db

REFUSED = [
    pytest.param(
        ["submit", "--image", "i", "--name", "n" * 256, "--", "x"],
        "--name: 256 characters, more than the 255 allowed",
        id="long-job-name",
    ),
    pytest.param(
        ["node", "drain", "n1", "--reason", "r\x00"],
        "--reason: NUL characters are not allowed",
        id="nul-reason",
    ),
    pytest.param(
        ["node", "show", "n" * 256],
        "node name: 256 characters, more than the 255 allowed",
        id="long-node-name",
    ),
    pytest.param(["node", "show", "n\x00"], "node name: NUL characters", id="nul-node-name"),
    pytest.param(["node", "ls", "n1", "n\x00"], "node name: NUL characters", id="nul-node-list"),
    pytest.param(["queue", "-u", "u\x00"], "--user: NUL characters", id="nul-user-filter"),
    pytest.param(["events", "--node", "n\x00"], "--node: NUL characters", id="nul-node-filter"),
    pytest.param(["migrate", "1", "--to", "n\x00"], "--to: NUL characters", id="nul-target"),
    pytest.param(["show", "job", "2147483648"], "less than or equal to 2147483647", id="big-id"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_what_postgresql_cannot_hold_is_refused_alike_on_both(
    store: db.Store,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setenv("GCTL_DB", db_url)
    node(store, "n1")
    ok("submit", "--image", "i", "--", "x")
    code, out, err = run(*args)
    assert code in (1, 2) and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("gctl: error: ") and message in err
    assert len(ok("queue", "-h").splitlines()) == 1
