"""Start and stop local test hosts (a real sshd and dockerd each) via scripts/testhosts.sh.

Plain functions (no fixtures) so a conftest can wrap them however it likes::

    info = testhosts.start(2)  # {"dir": ..., "key": ..., "image": ..., "hosts": [...]}
    ...
    testhosts.stop()

Host ``hI`` answers SSH as root at ``127.0.2.I`` port 2222 with the client key
``info["key"]``; ``docker`` run there talks to that host's own engine. The state
dir is ``$GCTL_TESTHOSTS_DIR`` (default ``/tmp/gctl-testhosts``). Needs root.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from scriptkit import run_script

# Generous: the first start on a fresh machine may apt-get install openssh-server
# and docker.io, and builds the job image.
START_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 180.0
OTHER_TIMEOUT_S = 120.0


def _run(args: list[str], timeout: float) -> str:
    """Run ``testhosts.sh ARGS...`` and return its stdout; RuntimeError on failure."""
    return run_script("testhosts.sh", args, timeout)


def _last_json(out: str, what: str) -> dict[str, Any]:
    lines = out.strip().splitlines()
    try:
        doc = json.loads(lines[-1]) if lines else None
    except ValueError as exc:
        raise RuntimeError(f"{what} printed no JSON: {lines!r}") from exc
    if not isinstance(doc, dict):
        raise RuntimeError(f"{what} printed no JSON object: {lines!r}")
    return doc


def start(n: int = 2) -> dict[str, Any]:
    """Make sure hosts h1..hN run (idempotent) and return their description (see env())."""
    return _last_json(_run(["start", str(n)], START_TIMEOUT_S), f"testhosts.sh start {n}")


def env() -> dict[str, Any]:
    """The description of the existing hosts.

    ``{"dir", "key", "image", "hosts": [{"name", "host", "port", "user", "docker_host",
    "work_dir", "fingerprint", "ssh_running", "docker_running", "frozen"}, ...]}``.
    """
    return _last_json(_run(["env"], OTHER_TIMEOUT_S), "testhosts.sh env")


def stop() -> None:
    """Stop every host and delete the state dir; a no-op if nothing runs."""
    _run(["stop"], STOP_TIMEOUT_S)


def ssh_stop(name: str) -> None:
    """Stop host ``name``'s sshd (and its sessions): the host stops answering SSH."""
    _run(["ssh-stop", name], OTHER_TIMEOUT_S)


def ssh_start(name: str) -> None:
    """Start host ``name``'s sshd again (waits until it lets us in)."""
    _run(["ssh-start", name], OTHER_TIMEOUT_S)


def rekey(name: str) -> None:
    """Give host ``name`` a new host key and restart its sshd."""
    _run(["rekey", name], OTHER_TIMEOUT_S)


def freeze(name: str) -> None:
    """SIGSTOP host ``name``'s sshd and its sessions: the host hangs (its jobs run on)."""
    _run(["freeze", name], OTHER_TIMEOUT_S)


def thaw(name: str) -> None:
    """SIGCONT what :func:`freeze` stopped."""
    _run(["thaw", name], OTHER_TIMEOUT_S)


def engine_stop(name: str) -> None:
    """Stop host ``name``'s dockerd as a service stop would: its containers get SIGTERM."""
    _run(["engine-stop", name], OTHER_TIMEOUT_S)


def engine_start(name: str) -> None:
    """Start host ``name``'s dockerd again (waits until it answers)."""
    _run(["engine-start", name], OTHER_TIMEOUT_S)


def host_key_line(info: dict[str, Any], name: str) -> str:
    """The known_hosts line (``[127.0.2.I]:2222 ssh-ed25519 AAAA...``) of host ``name``."""
    host = next(h for h in info["hosts"] if h["name"] == name)
    pub = pathlib.Path(info["dir"], name, "ssh_host_ed25519_key.pub").read_text().split()
    return f"[{host['host']}]:{host['port']} {pub[0]} {pub[1]}"


def ssh_argv(info: dict[str, Any], name: str, known_hosts: pathlib.Path) -> list[str]:
    """``ssh`` arguments for root on host ``name``, checking its key against ``known_hosts``.

    Append the remote command. Host key checking stays strict: write the line
    from host_key_line() (or an old one, to see a changed key refused).
    """
    host = next(h for h in info["hosts"] if h["name"] == name)
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-p",
        str(host["port"]),
        "-i",
        info["key"],
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "ConnectTimeout=5",
        f"{host['user']}@{host['host']}",
    ]
