"""``gctl node rekey``: accepting a node's deliberately changed host key, on both backends."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import paramiko
import pytest
from clikit import ok, run
from storekit import FP, node, on_gpus, req

from gctl.cli import nodes as node_cli
from gctl.services import db, jobs

NEW_FP = "SHA256:" + "B" * 43


@pytest.fixture
def site(store: db.Store, db_url: str, monkeypatch: pytest.MonkeyPatch) -> db.Store:
    """Node n1 running job 1, the store chosen as a user chooses it."""
    monkeypatch.setenv("GCTL_DB", db_url)
    monkeypatch.setenv("GCTL_USER", "root")
    node(store, "n1")
    jobs.submit(store, [req()])
    on_gpus(store, 1, "n1", [0], since=1.0)
    return store


def _events(kind: str) -> list[dict[str, Any]]:
    return [e for e in json.loads(ok("events", "--json"))["events"] if e["kind"] == kind]


def test_rekey_replaces_the_fingerprint_while_jobs_run_and_says_so(site: db.Store) -> None:
    assert ok("node", "rekey", "n1", "--host-key-fingerprint", NEW_FP) == (
        f"node n1: host key {FP} -> {NEW_FP}\n"
    )
    assert json.loads(ok("node", "show", "n1", "--json"))["host_key_fingerprint"] == NEW_FP
    (event,) = _events("node.rekey")
    assert event["node"] == "n1" and event["user"] == "root"
    assert event["message"] == f"node n1 host key changed: {FP} -> {NEW_FP}"
    again = json.loads(ok("node", "rekey", "n1", "--host-key-fingerprint", NEW_FP, "--json"))
    assert again == {"node": "n1", "old": NEW_FP, "new": NEW_FP, "changed": False}
    assert len(_events("node.rekey")) == 1  # nothing changed, nothing recorded


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ghost", "--host-key-fingerprint", NEW_FP], "unknown node 'ghost'"),
        (["n1", "--host-key-fingerprint", "SHA256:short"], "expected SHA256:<43 base64"),
        (["n1", "--host-key-fingerprint", NEW_FP + "\n"], "expected SHA256:<43 base64"),
        (["ghost"], "unknown node 'ghost'"),
    ],
)
def test_rekey_refuses_an_unknown_node_or_a_malformed_fingerprint(
    site: db.Store, args: list[str], message: str
) -> None:
    code, out, err = run("node", "rekey", *args)
    assert (code, out) == (1, "")
    assert len(err.splitlines()) == 1 and message in err
    assert json.loads(ok("node", "show", "n1", "--json"))["host_key_fingerprint"] == FP
    assert _events("node.rekey") == []


@contextmanager
def ssh_host() -> Iterator[tuple[int, str]]:
    """A local SSH server that presents a new host key: (its port, the key's fingerprint)."""
    key = paramiko.ECDSAKey.generate()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        # Only the key exchange matters: the client hangs up once it has the key.
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            conn, _ = listener.accept()
            with paramiko.Transport(conn) as transport:
                transport.add_server_key(key)
                transport.start_server(server=paramiko.ServerInterface())
                transport.join(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], key.fingerprint
    finally:
        listener.close()


@pytest.mark.parametrize("confirmed", [True, False])
def test_rekey_without_a_fingerprint_shows_the_host_s_key_and_asks(
    site: db.Store, monkeypatch: pytest.MonkeyPatch, confirmed: bool
) -> None:
    with ssh_host() as (port, scanned):
        where = ("--host", "127.0.0.1", "--port", str(port), "--host-key-fingerprint", FP)
        ok("node", "add", "n2", *where)
        monkeypatch.setattr(node_cli.sys.stdin, "isatty", lambda: True)
        monkeypatch.setattr(node_cli.typer, "confirm", lambda *args, **kwargs: confirmed)
        code, out, err = run("node", "rekey", "n2")
    assert out.startswith(f"127.0.0.1:{port} presents a ecdsa-sha2-nistp256 host key: {scanned}")
    shown = json.loads(ok("node", "show", "n2", "--json"))["host_key_fingerprint"]
    if confirmed:
        assert code == 0 and shown == scanned
    else:
        assert code == 1 and err == "gctl: error: n2: host key not confirmed; nothing recorded\n"
        assert shown == FP


def test_rekey_without_a_terminal_says_which_fingerprint_to_check(site: db.Store) -> None:
    with ssh_host() as (port, scanned):
        where = ("--host", "127.0.0.1", "--port", str(port), "--host-key-fingerprint", FP)
        ok("node", "add", "n2", *where)
        code, out, err = run("node", "rekey", "n2")
    assert (code, out) == (1, "")
    assert err.endswith(f"and pass --host-key-fingerprint {scanned}\n")
    assert json.loads(ok("node", "show", "n2", "--json"))["host_key_fingerprint"] == FP
