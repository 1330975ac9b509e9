"""A host no resolver can take, or a port that is not SSH, is its node's one-line error, never a
crash or a traceback; no network beyond loopback needed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gctl.hosts.ssh import HostError, Pool, Target, fan_out

FP = "SHA256:" + "A" * 43


@pytest.mark.parametrize("host", ["gpu01..example.com", "x" * 64 + ".example.com", "\udcff"])
def test_a_host_the_resolver_refuses_is_that_nodes_error(host: str) -> None:
    bad = Target(node="gpu01", host=host, port=22, fingerprint=FP)
    with Pool(ssh_config=Path("/nonexistent"), connect_timeout=1) as pool:
        with pytest.raises(HostError, match=r"^gpu01: cannot reach .*idna"):
            pool.client(bad)
        with pytest.raises(HostError, match=r"^gpu01: cannot reach"):
            pool.host_key(bad)
        answers = fan_out([bad], lambda t: pool.run(t, ["true"]))
    assert isinstance(answers["gpu01"], HostError)


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("Host gpu01\n  Port twenty-two\n", "~/.ssh/config for 'gpu01'"),
        ('Host gpu01\n  ProxyCommand nc "%h %p\n', "cannot reach"),
        ("Host gpu01\n  ProxyCommand /nonexistent/proxy %h %p\n", ".*/nonexistent/proxy"),
    ],
)
def test_a_bad_ssh_config_entry_is_that_nodes_error(
    tmp_path: Path, config: str, needle: str
) -> None:
    path = tmp_path / "config"
    path.write_text(config)
    target = Target(node="gpu01", host="gpu01", fingerprint=FP)
    with Pool(ssh_config=path, connect_timeout=1) as pool:
        with pytest.raises(HostError, match=f"^gpu01: {needle}"):
            pool.client(target)
        with pytest.raises(HostError, match=f"^gpu01: {needle}"):
            pool.host_key(target)


def test_a_port_that_is_not_ssh_is_one_line_per_node_and_no_traceback(tmp_path: Path) -> None:
    """paramiko's own log of the failed handshake (two tracebacks) never reaches the terminal."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_like_http() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    threading.Thread(target=answer_like_http, daemon=True).start()
    env = {**os.environ, "GCTL_DB": str(tmp_path / "g.db"), "GCTL_CONFIG": str(tmp_path / "c")}
    gctl = str(Path(sys.executable).with_name("gctl"))
    subprocess.run([gctl, "init"], env=env, check=True, capture_output=True)
    add = ["node", "add", "web", "--host", "127.0.0.1", "--port", str(port)]
    subprocess.run([gctl, *add, "--host-key-fingerprint", FP], env=env, check=True)
    try:
        for command in (["node", "probe"], ["node", "top"]):
            done = subprocess.run(
                [gctl, *command], env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 1
            assert "Traceback" not in done.stderr and "Exception" not in done.stderr
            assert done.stderr == "gctl: error: no answer from 1 node(s): web\n"
            assert "web: SSH to 127.0.0.1" in done.stdout
    finally:
        server.close()
