"""scripts/testhosts.sh (real sshd + dockerd per host) and the job image's train.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import testhosts
from scriptkit import REPO_ROOT

TRAIN_PY = REPO_ROOT / "scripts" / "testimage" / "train.py"


# ---------------------------------------------------------------- the hosts


@pytest.fixture
def live(hosts: dict[str, Any]) -> dict[str, Any]:
    """The session's hosts as they are now (another test may have rekeyed one)."""
    return testhosts.env()


def by_name(info: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in info["hosts"] if h["name"] == name)


def ssh(
    info: dict[str, Any], name: str, tmp_path: Path, *cmd: str, key_line: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` as root on host ``name``, trusting only ``key_line`` (default: its key)."""
    known = tmp_path / f"known_hosts_{name}"
    known.write_text((key_line or testhosts.host_key_line(info, name)) + "\n")
    return subprocess.run(
        [*testhosts.ssh_argv(info, name, known), *cmd],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def keyscan(host: dict[str, Any]) -> str:
    """The host's ed25519 key as its sshd presents it, as a known_hosts line."""
    out = subprocess.run(
        ["ssh-keyscan", "-p", str(host["port"]), "-t", "ed25519", host["host"]],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 1, out
    return lines[0]


def fingerprint_of(key_line: str) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-lf", "-"],
        input=key_line + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()[1]


def test_env_describes_the_hosts(live: dict[str, Any]) -> None:
    d = live["dir"]
    assert live["key"] == f"{d}/id_ed25519"
    assert live["image"] == "gctl-test/train:1"
    assert [h["name"] for h in live["hosts"]] == ["h1", "h2"]
    for i, h in enumerate(live["hosts"], 1):
        assert h["host"] == f"127.0.2.{i}"
        assert (h["port"], h["user"]) == (2222, "root")
        assert h["docker_host"] == f"unix://{d}/h{i}/docker.sock"
        assert h["work_dir"] == f"{d}/h{i}/work"
        assert Path(h["work_dir"]).is_dir()
        assert h["fingerprint"].startswith("SHA256:")
        assert h["ssh_running"] and h["docker_running"]
    assert testhosts.env() == live


def test_each_host_presents_its_own_key(live: dict[str, Any], tmp_path: Path) -> None:
    h1, h2 = by_name(live, "h1"), by_name(live, "h2")
    assert h1["fingerprint"] != h2["fingerprint"]
    for h in (h1, h2):
        line = keyscan(h)
        assert fingerprint_of(line) == h["fingerprint"]
        res = ssh(live, h["name"], tmp_path, "echo", "$DOCKER_HOST", key_line=line)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == h["docker_host"]
    # h1's key is not accepted for h2.
    wrong = keyscan(h1).replace("127.0.2.1", "127.0.2.2")
    res = ssh(live, "h2", tmp_path, "true", key_line=wrong)
    assert res.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in res.stderr


def test_job_container_runs_over_ssh(live: dict[str, Any], tmp_path: Path) -> None:
    res = ssh(
        live, "h1", tmp_path, "docker", "run", "--rm", "--network", "host", "gctl-test/train:1",
        "python3", "/opt/gctl/train.py", "--steps", "3", "--step-time", "0",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["step 1/3", "step 2/3", "step 3/3", "done"]


def test_memory_limit_oom_kills_the_job(live: dict[str, Any], tmp_path: Path) -> None:
    name = "gctl-oom-probe"
    res = ssh(
        live, "h1", tmp_path, "docker", "run", "--name", name, "--network", "host",
        "--memory", "32m", "--memory-swap", "32m", "gctl-test/train:1",
        "python3", "/opt/gctl/train.py", "--steps", "1", "--alloc-mb", "100",
    )  # fmt: skip
    try:
        assert res.returncode == 137, res.stdout + res.stderr
        state = ssh(live, "h1", tmp_path, "docker", "inspect", "-f", "'{{.State.OOMKilled}}'", name)
        assert state.stdout.strip() == "true", state.stderr
    finally:
        ssh(live, "h1", tmp_path, "docker", "rm", "-f", name)


def test_each_host_has_its_own_engine(live: dict[str, Any], tmp_path: Path) -> None:
    name = "gctl-isolation-probe"
    run = ssh(
        live, "h1", tmp_path, "docker", "run", "-d", "--name", name, "--network", "host",
        "gctl-test/train:1", "python3", "/opt/gctl/train.py", "--steps", "1000",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    try:
        ps = "docker ps -a --format '{{.Names}}'"
        on_h1 = ssh(live, "h1", tmp_path, ps)
        on_h2 = ssh(live, "h2", tmp_path, ps)
        assert on_h1.returncode == 0 and on_h2.returncode == 0, on_h1.stderr + on_h2.stderr
        assert name in on_h1.stdout.split()
        assert name not in on_h2.stdout.split()
    finally:
        ssh(live, "h1", tmp_path, "docker", "rm", "-f", name)


def test_start_again_leaves_running_hosts_alone(live: dict[str, Any]) -> None:
    d = Path(live["dir"])
    pids = {p: p.read_text() for p in sorted(d.glob("h*/*.pid"))}
    assert len(pids) == 4  # docker.pid and sshd.pid of h1 and h2
    again = testhosts.start(2)
    assert again == live
    assert {p: p.read_text() for p in pids} == pids


def test_ssh_stop_refuses_connections_until_ssh_start(live: dict[str, Any], tmp_path: Path) -> None:
    h2 = by_name(live, "h2")
    testhosts.ssh_stop("h2")
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((h2["host"], h2["port"]), timeout=5).close()
        now = by_name(testhosts.env(), "h2")
        assert (now["ssh_running"], now["docker_running"]) == (False, True)
        assert by_name(testhosts.env(), "h1")["ssh_running"]
    finally:
        testhosts.ssh_start("h2")
    res = ssh(live, "h2", tmp_path, "true")
    assert res.returncode == 0, res.stderr


def test_rekey_changes_the_host_key(live: dict[str, Any], tmp_path: Path) -> None:
    old_line = testhosts.host_key_line(live, "h2")
    testhosts.rekey("h2")
    info = testhosts.env()
    new = by_name(info, "h2")
    assert new["fingerprint"] != by_name(live, "h2")["fingerprint"]
    assert fingerprint_of(keyscan(new)) == new["fingerprint"]
    refused = ssh(info, "h2", tmp_path, "true", key_line=old_line)
    assert refused.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in refused.stderr
    assert ssh(info, "h2", tmp_path, "true").returncode == 0
    # Other live keep their keys.
    assert by_name(info, "h1")["fingerprint"] == by_name(live, "h1")["fingerprint"]


# ---------------------------------------------------------------- train.py, run directly


def train(job_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TRAIN_PY), *args],
        env={**os.environ, "GCTL_JOB_DIR": str(job_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def start_train(job_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(TRAIN_PY), *args],
        env={**os.environ, "GCTL_JOB_DIR": str(job_dir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_json(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def wait_for_step(job_dir: Path, step: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if read_json(job_dir / "progress.json")["step"] >= step:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"train.py did not reach step {step}")


def test_train_checkpoints_and_resumes(tmp_path: Path) -> None:
    job = tmp_path / "job"  # created by train.py
    first = train(job, "--steps", "5", "--step-time", "0", "--checkpoint-every", "2")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "done"
    assert read_json(job / "checkpoint.json")["step"] == 4
    progress = read_json(job / "progress.json")
    assert (progress["step"], progress["steps"]) == (5, 5)
    assert "time" in progress and "rate" not in progress  # 5 steps: too few for a rate

    second = train(job, "--steps", "8", "--step-time", "0")
    assert second.returncode == 0, second.stderr
    lines = second.stdout.splitlines()
    assert lines[0] == "resuming from step 4"
    steps = [line for line in lines if line.startswith("step ")]
    assert steps == ["step 5/8", "step 6/8", "step 7/8", "step 8/8"]
    assert lines[-1] == "done"


def test_train_sigusr1_checkpoints_and_sigterm_checkpoints_and_exits_0(tmp_path: Path) -> None:
    proc = start_train(tmp_path, "--steps", "10000", "--step-time", "0.02")
    try:
        wait_for_step(tmp_path, 3)
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not (tmp_path / "checkpoint.json").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        saved = read_json(tmp_path / "checkpoint.json")["step"]
        assert saved >= 3
        wait_for_step(tmp_path, saved + 3)  # still running after SIGUSR1
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    final = read_json(tmp_path / "checkpoint.json")["step"]
    assert final == read_json(tmp_path / "progress.json")["step"] > saved
    assert "done" not in out.splitlines()


def test_train_fail_at_exits_3(tmp_path: Path) -> None:
    res = train(tmp_path, "--steps", "10", "--step-time", "0", "--fail-at", "3")
    assert res.returncode == 3
    assert res.stdout.splitlines()[-1] == "step 3/10"
    assert read_json(tmp_path / "progress.json")["step"] == 3


def test_train_alloc_mb(tmp_path: Path) -> None:
    res = train(tmp_path, "--steps", "1", "--step-time", "0", "--alloc-mb", "16")
    assert res.returncode == 0, res.stderr
    assert "allocated 16 MB" in res.stdout
