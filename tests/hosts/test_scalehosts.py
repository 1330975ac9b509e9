"""scripts/scalehosts.sh: light hosts that gctl reaches like any node, hang on demand, and go.

Three hosts sharing one engine, in a directory and on a port of their own
(never the shared test hosts'): probed as nodes, one frozen then thawed,
then everything stopped.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scalekit import light_store, scalehosts

from gctl.hosts.ssh import Pool
from gctl.services import probe

DIR = "/tmp/gctl-scalehosts-test"
PORT = "2422"


def _harness(*args: str) -> str:
    return scalehosts(DIR, PORT, *args)


@pytest.fixture
def light() -> Iterator[dict[str, Any]]:
    """Three light hosts on one engine; stopped after the test."""
    try:
        yield dict(json.loads(_harness("start", "3", "1").strip().splitlines()[-1]))
    finally:
        _harness("stop")


def _sshd_pids() -> list[int]:
    """The light hosts' sshd listeners, not the children a connection forks (while they last)."""
    found = subprocess.run(["pgrep", "-f", f"sshd -f {DIR}/s"], capture_output=True, text=True)
    pids = {int(pid) for pid in found.stdout.split()}
    parents = {pid: _parent(pid) for pid in pids}
    return sorted(pid for pid, parent in parents.items() if parent not in pids | {None})


def _stat(pid: int) -> tuple[int, str] | None:
    """The parent of ``pid`` and its state letter (R, S, T...), or None once it has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), fields[0]


def _parent(pid: int) -> int | None:
    """The parent of ``pid``, or None once it has ended (no longer counted)."""
    got = _stat(pid)
    return got[0] if got else None


def _tree_states(root: int) -> dict[int, str]:
    """The state letter (R, S, T...) of ``root`` and of each of its descendants, by pid."""
    stats = {int(p.name): _stat(int(p.name)) for p in Path("/proc").glob("[0-9]*")}
    table = {pid: got for pid, got in stats.items() if got is not None}
    found, grew = {root}, True
    while grew:
        more = {pid for pid, (parent, _) in table.items() if parent in found} - found
        found, grew = found | more, bool(more)
    return {pid: table[pid][1] for pid in found if pid in table}


def _sshd_count() -> int:
    return len(_sshd_pids())


_CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/cpu")


def _cpu_cgroup(pid: int) -> str:
    """Process ``pid``'s cgroup in the hierarchy that has the CPU controller (v1), else v2's."""
    lines = [ln.split(":", 2) for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    v1 = [path for _, controllers, path in lines if "cpu" in controllers.split(",")]
    return v1[0] if v1 else next(path for hid, _, path in lines if hid == "0")


def test_light_hosts_answer_as_nodes_hang_when_frozen_and_stop_without_a_trace(
    light: dict[str, Any], tmp_path: Path
) -> None:
    hosts = light["hosts"]
    assert [h["name"] for h in hosts] == ["s1", "s2", "s3"]
    assert len({h["host"] for h in hosts}) == 3  # an address each
    assert {h["docker_host"] for h in hosts} == {f"unix://{DIR}/engines/h1/docker.sock"}
    assert _sshd_count() == 3
    # all the hosts' processes in one cgroup, which weighs as much as the daemon's session
    cgroups = {_cpu_cgroup(pid) for pid in _sshd_pids()}
    assert cgroups == {f"/{Path(DIR).name}"}
    store = light_store(light, str(tmp_path / "gctl.db"))
    with Pool(connect_timeout=3.0, command_timeout=5.0, ssh_config=Path("/nonexistent")) as pool:
        assert [p.responding for p in probe.probe(store, pool=pool)] == [True, True, True]
        listeners = {n: int(Path(DIR, n, "sshd.pid").read_text()) for n in ("s1", "s2", "s3")}
        _harness("freeze", "s2", "s3")  # at once: every process of both, sessions included
        try:
            frozen = {n: _tree_states(listeners[n]) for n in ("s1", "s2", "s3")}
            got = {p.node.name: p.responding for p in probe.probe(store, pool=pool)}
        finally:
            _harness("thaw", "s2", "s3")
        assert all(len(frozen[n]) > 1 for n in ("s2", "s3"))  # a session of the pool's, too
        assert set(frozen["s2"].values()) == set(frozen["s3"].values()) == {"T"}
        assert "T" not in frozen["s1"].values()
        assert got == {"s1": True, "s2": False, "s3": False}
        assert "T" not in _tree_states(listeners["s2"]).values()
        assert all(p.responding for p in probe.probe(store, pool=pool))
    _harness("stop")
    assert _sshd_count() == 0 and not Path(DIR).exists()
    assert not any(Path(root, Path(DIR).name).exists() for root in _CGROUP_ROOTS)
