"""The hosts layer end to end on real sshd + dockerd test hosts: what issue 4 says must hold."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import testhosts
from clikit import run
from sqlalchemy import select

from gctl.daemon import jobfiles
from gctl.hosts.agent_link import AgentLinks
from gctl.hosts.engine import ContainerSpec, Engine, host_config
from gctl.hosts.mounts import Mount
from gctl.hosts.ssh import (
    CommandTimeout,
    HostError,
    HostKeyMismatch,
    Pool,
    Target,
    raise_open_files,
)
from gctl.services import db, hostops
from gctl.store.engine import transaction
from gctl.store.identity import store_id
from gctl.store.models import NodeRow

IMAGE = "gctl-test/train:1"
TRAIN = ("python3", "/opt/gctl/train.py")


def _engine(store: db.Store, pool: Pool, name: str) -> tuple[Engine, str]:
    """A node's engine and a fresh job directory root under the store's tree on the node.

    Fresh: the daemon tests leave job directories with checkpoints behind, and
    the training program resumes from one it finds.
    """
    with transaction(store.engine, write=False) as s:
        row = s.scalars(select(NodeRow).where(NodeRow.name == name)).one()
        sid = store_id(s.connection())
        root = hostops.store_dir(row, sid)
        return hostops.engine(pool, row, sid), f"{root}/e2e-{uuid.uuid4().hex[:12]}"


def _spec(
    node: str, jobs_root: str, job_id: int, gpus: tuple[int, ...], *cmd: str, **kw: Any
) -> ContainerSpec:
    return ContainerSpec(
        job_id=job_id,
        attempt=0,
        node=node,
        store_id=jobs_root.split("/stores/")[1].split("/")[0],
        image=IMAGE,
        command=cmd,
        gpu_indices=gpus,
        gpu_uuids=tuple(f"GPU-emulated-{node}-{i}" for i in gpus),
        job_dir=f"{jobs_root}/{job_id}",
        emulated=True,
        **kw,
    )


def _wait_for(what: str, check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _step(pool: Pool, engine: Engine, job_dir: str) -> int:
    res = pool.run(engine.target, ["cat", f"{job_dir}/progress.json"])
    return int(json.loads(res.stdout)["step"]) if res.rc == 0 else -1


def test_probe_reports_both_emulated_nodes(host_store: db.Store) -> None:
    code, out, err = run("node", "probe", "--json")
    assert code == 0, err
    got = {n["name"]: n for n in json.loads(out)}
    assert set(got) == {"h1", "h2"}
    for n in got.values():
        assert n["responding"] and n["error"] is None
        assert n["gpu_source"] == "emulated"
        assert n["docker_version"]
        assert [g["emulated"] for g in n["gpus"]] == [True, True]
    code, out, _ = run("node", "ls")
    assert code == 0 and "*" not in out and "(emulated)" in out
    code, out, _ = run("node", "show", "h1")
    assert code == 0 and f"HostKey={got['h1']['host_key_fingerprint']}" in out
    assert "LastSeen=-" not in out and "LastError" not in out


def test_container_lifecycle_on_given_gpus(host_store: db.Store, pool: Pool) -> None:
    started = []
    for node, gpus, job in (("h1", (1,), 11), ("h2", (0, 1), 12)):
        engine, root = _engine(host_store, pool, node)
        spec = _spec(node, root, job, gpus, *TRAIN, "--steps", "100000", "--step-time", "0.02")
        cid = engine.start(spec)
        started.append((engine, cid, spec))
    for engine, cid, spec in started:
        st = engine.state(cid)
        assert st.running and st.job_id == spec.job_id and st.gpu_indices == spec.gpu_indices
        _wait_for("progress", lambda e=engine, s=spec: _step(pool, e, s.job_dir) > 2)
        assert b"step " in b"".join(engine.logs(cid, tail=5))

    engine, cid, spec = started[0]
    engine.pause(cid)
    assert engine.state(cid).paused
    frozen = _step(pool, engine, spec.job_dir)
    time.sleep(0.5)
    assert _step(pool, engine, spec.job_dir) == frozen  # no progress while paused
    engine.unpause(cid)
    _wait_for("progress after unpause", lambda: _step(pool, engine, spec.job_dir) > frozen)

    for engine, cid, spec in started:
        engine.stop(cid, grace=10)
        st = engine.state(cid)
        assert st.status == "exited" and st.exit_code == 0  # SIGTERM: checkpoint, exit 0
        ckpt = pool.run(engine.target, ["cat", f"{spec.job_dir}/checkpoint.json"])
        assert ckpt.rc == 0 and json.loads(ckpt.stdout)["step"] > 0
        engine.remove(cid)


def test_exit_code_and_oom_are_seen(host_store: db.Store, pool: Pool) -> None:
    engine, root = _engine(host_store, pool, "h1")
    failing = engine.start(
        _spec("h1", root, 21, (0,), *TRAIN, "--steps", "9", "--fail-at", "2", "--step-time", "0")
    )
    assert engine.wait(failing, timeout=30) == 3
    st = engine.state(failing)
    assert st.exit_code == 3 and not st.oom_killed
    hog = engine.start(
        _spec(
            "h1",
            root,
            22,
            (1,),
            *TRAIN,
            "--alloc-mb",
            "256",
            "--step-time",
            "0",
            memory_limit_mb=64,
        )
    )
    engine.wait(hog, timeout=30)
    assert engine.state(hog).oom_killed
    owned = {c.job_id for c in engine.owned()}
    assert {21, 22} <= owned
    other, _ = _engine(host_store, pool, "h2")
    assert not {21, 22} & {c.job_id for c in other.owned()}  # each host has its own engine
    for cid in (failing, hog):
        engine.remove(cid)


TRICKY = [
    'it\'s "quoted"',
    "$(touch /tmp/pwned) `id` ; rm -rf / && echo no",
    "line one\nline two\t\\n",
    "${HOME} * ? [a] ~ | > < &",
]


def test_text_arrives_byte_for_byte(host_store: db.Store, pool: Pool) -> None:
    engine, root = _engine(host_store, pool, "h2")
    show = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': os.environ['X']}))"
    spec = _spec(
        "h2", root, 31, (0,), "python3", "-c", show, *TRICKY, env={"X": TRICKY[1] + TRICKY[2]}
    )
    cid = engine.start(spec)
    assert engine.wait(cid, timeout=30) == 0
    out = json.loads(b"".join(engine.logs(cid)))
    assert out == {"argv": TRICKY, "env": TRICKY[1] + TRICKY[2]}
    assert engine.state(cid).name == spec.name
    engine.remove(cid)
    echo = pool.run(engine.target, ["printf", "%s\n", *TRICKY])
    assert echo.rc == 0 and echo.stdout.decode() == "".join(t + "\n" for t in TRICKY)


def test_a_command_runs_while_the_process_holds_more_than_1024_descriptors(
    host_store: db.Store, pool: Pool
) -> None:
    """A daemon holds a connection per node: its command's channel gets a descriptor past
    1,024, which select() refuses."""
    engine, _ = _engine(host_store, pool, "h1")
    assert pool.run(engine.target, ["true"]).rc == 0  # connected before the descriptors go
    assert raise_open_files() > 1100
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) >= 1024
        echo = pool.run(engine.target, ["echo", "past 1024"])
    finally:
        for fd in held:
            os.close(fd)
    assert echo.rc == 0 and echo.stdout == b"past 1024\n"


def test_stopped_sshd_is_reported_while_the_other_host_works(host_store: db.Store) -> None:
    testhosts.ssh_stop("h2")
    try:
        start = time.monotonic()
        code, out, _ = run("node", "probe", "--json")
        took = time.monotonic() - start
        assert code == 1
        got = {n["name"]: n for n in json.loads(out)}
        assert got["h1"]["responding"] and got["h1"]["error"] is None
        assert not got["h2"]["responding"]
        assert "h2: cannot reach 127.0.2.2:2222" in got["h2"]["error"]
        assert took < 15
        code, out, _ = run("node", "ls")
        line = next(ln for ln in out.splitlines() if ln.startswith("h2"))
        assert "*" in line
    finally:
        testhosts.ssh_start("h2")
    code, out, err = run("node", "probe", "h2", "--json")
    assert code == 0, err


def test_changed_host_key_is_refused(host_store: db.Store, pool: Pool) -> None:
    engine, _ = _engine(host_store, pool, "h1")
    assert pool.run(engine.target, ["true"]).rc == 0
    old = engine.target.fingerprint
    pool.close()
    testhosts.rekey("h1")
    new = next(h["fingerprint"] for h in testhosts.env()["hosts"] if h["name"] == "h1")
    with pytest.raises(HostKeyMismatch) as refused:
        pool.run(engine.target, ["true"])
    assert refused.value.expected == old and refused.value.got == new
    code, out, _ = run("node", "probe", "h1", "--json")
    assert code == 1
    error = json.loads(out)[0]["error"]
    assert "HOST KEY CHANGED" in error and str(old) in error and new in error


def test_unknown_host_key_is_shown_and_not_recorded(
    host_store: db.Store, hosts: dict[str, Any]
) -> None:
    h2 = next(h for h in testhosts.env()["hosts"] if h["name"] == "h2")
    code, _, err = run(
        "node", "add", "again", "--host", h2["host"], "--port", str(h2["port"]), "--user", "root",
        "--key", hosts["key"],
    )  # fmt: skip
    assert code == 1
    assert h2["fingerprint"] in err and "--host-key-fingerprint" in err
    code, _, err = run("node", "show", "again")
    assert code == 1 and "unknown node" in err


def test_top_derives_emulated_use_from_the_jobs(host_store: db.Store, pool: Pool) -> None:
    engine, root = _engine(host_store, pool, "h1")
    slow = (*TRAIN, "--steps", "100000", "--step-time", "0.1")
    a = engine.start(_spec("h1", root, 41, (0,), *slow, gpu_mem_mb=4000))
    b = engine.start(_spec("h1", root, 42, (0, 1), *slow, gpu_mem_mb=3000))
    try:
        code, out, err = run("node", "top", "h1", "--json")
        assert code == 0, err
        (h1,) = json.loads(out)
        assert h1["source"] == "emulated" and h1["responding"]
        gpus = {g["index"]: g for g in h1["gpus"]}
        assert (gpus[0]["util_percent"], gpus[0]["memory_used_mb"]) == (100.0, 7000)
        assert (gpus[1]["util_percent"], gpus[1]["memory_used_mb"]) == (100.0, 3000)
        assert gpus[0]["jobs"] == [41, 42] and all(g["emulated"] for g in gpus.values())
        jobs = {j["job_id"]: j for j in h1["jobs"]}
        assert jobs[41]["util_percent"] == 50.0  # GPU 0 shared by two running jobs
        assert jobs[42]["util_percent"] == 75.0  # half of GPU 0, all of GPU 1
        assert jobs[42]["memory_mb"] == 6000
        engine.pause(b)  # a frozen job keeps its memory but uses no time
        (h1,) = json.loads(run("node", "top", "h1", "--json")[1])
        gpus = {g["index"]: g for g in h1["gpus"]}
        jobs = {j["job_id"]: j for j in h1["jobs"]}
        assert (gpus[1]["util_percent"], gpus[1]["memory_used_mb"]) == (0.0, 3000)
        assert (jobs[41]["util_percent"], jobs[42]["util_percent"]) == (100.0, 0.0)
        code, out, _ = run("node", "top")
        assert code == 0 and "(emulated)" in out and "-41-0" in out
    finally:
        for cid in (a, b):
            engine.remove(cid)


def test_ssh_config_alias_and_agent_login(hosts: dict[str, Any], tmp_path: Path) -> None:
    h1 = next(h for h in testhosts.env()["hosts"] if h["name"] == "h1")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu-a\n  HostName {h1['host']}\n  Port {h1['port']}\n  User root\n")
    agent = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True)
    env = dict(re.findall(r"(SSH_AUTH_SOCK|SSH_AGENT_PID)=([^;]+);", agent.stdout))
    try:
        subprocess.run(["ssh-add", hosts["key"]], env={**os.environ, **env}, check=True)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SSH_AUTH_SOCK", env["SSH_AUTH_SOCK"])
            mp.setenv("HOME", str(tmp_path))  # no ~/.ssh keys to fall back on: the agent logs in
            # Port 22 is what a node gets without --port; the alias's Port must win.
            target = Target("a", "gpu-a", port=None, fingerprint=h1["fingerprint"])
            with Pool(ssh_config=config, connect_timeout=5) as pool:
                res = pool.run(target, ["sh", "-c", 'echo "$DOCKER_HOST"'])
                assert res.rc == 0 and res.text.strip() == h1["docker_host"]
                with pytest.raises(CommandTimeout):
                    pool.run(target, ["sleep", "5"], timeout=0.5)
                assert pool.run(target, ["true"]).rc == 0  # the connection survives a timeout
    finally:
        subprocess.run(["kill", env["SSH_AGENT_PID"]], check=False)


def test_logs_follow_and_cpu_pinning(host_store: db.Store, pool: Pool) -> None:
    engine, root = _engine(host_store, pool, "h2")
    spec = _spec(
        "h2",
        root,
        51,
        (1,),
        *TRAIN,
        "--steps",
        "5",
        "--step-time",
        "0.2",
        cpuset="0",
        cpuset_mems="0",
    )
    cid = engine.start(spec)
    lines = b"".join(engine.logs(cid, follow=True)).decode().splitlines()
    assert lines[-1] == "done" and lines[:5] == [f"step {i}/5" for i in range(1, 6)]
    pinned = engine.api.inspect_container(cid)["HostConfig"]
    assert (pinned["CpusetCpus"], pinned["CpusetMems"]) == ("0", "0")
    engine.remove(cid)


def _add_on_a_terminal(args: list[str], answer: bytes, env: dict[str, str]) -> tuple[int, str]:
    """``gctl node add`` on a real pseudo-terminal, answering its question with ``answer``."""
    gctl = str(Path(sys.executable).with_name("gctl"))
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [gctl, "node", "add", *args], stdin=child, stdout=child, stderr=child, env=env
    )
    os.close(child)
    seen = b""
    deadline = time.monotonic() + 30
    while b"[y/N]" not in seen and time.monotonic() < deadline:
        seen += os.read(main, 4096)
    os.write(main, answer)
    code = proc.wait(timeout=30)
    try:
        while chunk := os.read(main, 4096):
            seen += chunk
    except OSError:  # the terminal closes with the process
        pass
    os.close(main)
    return code, seen.decode(errors="replace")


@pytest.mark.parametrize(("answer", "recorded"), [(b"y\n", True), (b"n\n", False)])
def test_operator_confirms_the_host_key_on_a_terminal(
    host_store: db.Store, hosts: dict[str, Any], answer: bytes, recorded: bool
) -> None:
    h2 = next(h for h in testhosts.env()["hosts"] if h["name"] == "h2")
    args = [
        "new",
        "--host",
        h2["host"],
        "--port",
        str(h2["port"]),
        "--user",
        "root",
        "--key",
        hosts["key"],
    ]
    code, shown = _add_on_a_terminal(args, answer, dict(os.environ))
    assert h2["fingerprint"] in shown
    assert code == (0 if recorded else 1), shown
    code, out, _ = run("node", "show", "new", "--json")
    if recorded:
        assert json.loads(out)["host_key_fingerprint"] == h2["fingerprint"]
    else:
        assert code == 1 and "not confirmed" in shown


def test_real_gpus_are_requested_by_uuid(host_store: db.Store, pool: Pool) -> None:
    """No NVIDIA runtime on the test hosts: the engine itself refuses the device request."""
    engine, root = _engine(host_store, pool, "h1")
    spec = _spec("h1", root, 61, (0,), "true")
    real = dataclasses.replace(spec, emulated=False)
    with pytest.raises(HostError, match="nvidia") as refused:
        engine.start(real)
    assert str(refused.value).startswith(f"h1: start {spec.name}:")
    assert 'device driver "nvidia"' in str(refused.value)  # the request reached the engine
    assert 61 not in {c.job_id for c in engine.owned()}  # and nothing was left behind


def test_mounts_and_signals(host_store: db.Store, pool: Pool, hosts: dict[str, Any]) -> None:
    engine, root = _engine(host_store, pool, "h2")
    data = f"{hosts['dir']}/h2/data"
    assert (
        pool.run(engine.target, ["sh", "-c", f"mkdir -p {data} && echo hello > {data}/f"]).rc == 0
    )
    read = "import pathlib; print(pathlib.Path('/data/f').read_text().strip())"
    write = "open('/data/g', 'w')"
    mounts = (Mount(data, "/data", read_only=True),)
    ok = engine.start(_spec("h2", root, 71, (0,), "python3", "-c", read, mounts=mounts))
    assert engine.wait(ok, timeout=30) == 0 and b"".join(engine.logs(ok)).strip() == b"hello"
    ro = engine.start(_spec("h2", root, 72, (0,), "python3", "-c", write, mounts=mounts))
    assert engine.wait(ro, timeout=30) == 1 and b"Read-only file system" in b"".join(
        engine.logs(ro)
    )
    long = engine.start(_spec("h2", root, 73, (1,), *TRAIN, "--steps", "100000"))
    engine.kill(long, "KILL")
    assert engine.wait(long, timeout=30) == 137
    for cid in (ok, ro, long):
        engine.remove(cid)


def test_starting_the_same_run_twice_starts_one_container(host_store: db.Store, pool: Pool) -> None:
    engine, root = _engine(host_store, pool, "h1")
    spec = _spec("h1", root, 81, (0,), *TRAIN, "--steps", "100000")
    first = engine.start(spec)
    assert engine.start(spec) == first  # e.g. a daemon restarted before recording the start
    assert [c.id for c in engine.owned() if c.job_id == 81] == [first]
    engine.remove(first)

    # A daemon that died between creating a container and starting it: start it now.
    spec = _spec("h1", root, 82, (0,), *TRAIN, "--steps", "100000")
    config = host_config(spec, engine.api.api_version)
    made = engine.api.create_container(
        IMAGE, command=list(spec.command), name=spec.name, labels=spec.labels(), host_config=config
    )
    assert engine.state(made["Id"]).status == "created"
    assert engine.start(spec) == made["Id"]
    assert engine.state(made["Id"]).running
    engine.remove(made["Id"])


def test_each_attempt_gets_a_directory_of_its_own_seeded_from_the_one_before(
    host_store: db.Store, pool: Pool
) -> None:
    """Made by the node's long-running host agent, as the daemon does before every start."""
    engine, root = _engine(host_store, pool, "h1")
    look = (
        "import os; found = sorted(os.listdir('/gctl'));"
        " open('/gctl/seen', 'w').write(str(found)); open('/gctl/mine', 'w').write('x')"
    )
    base = f"{root}/84"
    seen = []
    agents = AgentLinks(pool, jobfiles.agent_argv("serve"))
    for attempt in (0, 1):
        timeout = pool.command_timeout
        assert jobfiles.prepare(agents, engine.target, base, attempt, timeout=timeout) is None
        spec = dataclasses.replace(
            _spec("h1", root, 84, (0,), "python3", "-c", look),
            attempt=attempt,
            job_dir=f"{base}/a{attempt}",
        )
        cid = engine.start(spec)
        assert engine.wait(cid, timeout=30) == 0
        engine.remove(cid)
        seen.append(pool.run_ok(engine.target, ["cat", f"{base}/a{attempt}/seen"], "read").text)
    agents.close()
    assert seen == ["[]", "['mine', 'seen']"]  # the first starts empty, the next gets its files
