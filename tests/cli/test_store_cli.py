"""The operator CLI over a real SQLite store, as a sysadmin runs it."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from clikit import ok, run
from dbfaults import ruin
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gctl import config
from gctl.hosts.emulated import GPU_DIR_IN_CONTAINER
from gctl.hosts.engine import JOB_DIR_IN_CONTAINER
from gctl.services import jobs, specs
from gctl.services.db import connect

FP = ("--host-key-fingerprint", "SHA256:" + "A" * 43)
"""A well-formed host key fingerprint: these nodes are recorded, never contacted."""


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_commands_before_init_say_how_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCTL_DB", str(tmp_path / "none.db"))
    code, out, err = run("queue")
    assert code == 1 and out == ""
    assert err.strip().endswith("run 'gctl init' first")


def test_init_writes_a_starter_config_that_later_commands_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "gctl.toml"
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))
    monkeypatch.delenv("GCTL_DB", raising=False)
    db = tmp_path / "a.db"
    ok("--db", str(db), "init")
    assert str(db) in cfg.read_text()
    current = json.loads(ok("db", "current", "--json"))  # no --db: the config file decides
    assert current["source"] == str(cfg) and current["current"] == current["head"]


@pytest.fixture
def as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Root's view of config files, with the system-wide file moved into ``tmp_path``."""
    system = tmp_path / "etc" / "gctl.toml"
    monkeypatch.setattr(config, "SYSTEM_CONFIG", system)
    monkeypatch.setattr(config, "is_root", lambda: True)
    monkeypatch.delenv("GCTL_CONFIG", raising=False)
    monkeypatch.delenv("GCTL_DB", raising=False)
    return system


def test_init_never_writes_a_url_from_the_environment_into_the_system_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_root: Path
) -> None:
    monkeypatch.setenv("GCTL_DB", str(tmp_path / "throwaway.db"))
    out = ok("init")
    assert not as_root.exists()
    assert "no config written: the database came from $GCTL_DB" in out
    assert "--write-config" in out
    out = ok("init", "--write-config")  # asked: written
    assert "throwaway.db" in as_root.read_text() and f"wrote config {as_root}" in out


def test_init_with_db_leaves_the_system_default_alone_unless_asked(
    tmp_path: Path, as_root: Path
) -> None:
    out = ok("--db", str(tmp_path / "x.db"), "init")
    assert not as_root.exists() and "does not change the system-wide default" in out


def test_init_says_why_it_leaves_an_existing_config(tmp_path: Path, as_root: Path) -> None:
    as_root.parent.mkdir()
    as_root.write_text(f'[store]\nurl = "{tmp_path / "site.db"}"\n')
    before = as_root.read_text()
    out = ok("init")  # the config chose the database
    assert "site.db" in out and as_root.read_text() == before
    assert f"config {as_root} exists, left unchanged (it names this database)" in out
    code, out, err = run("--db", str(tmp_path / "other.db"), "init", "--write-config")
    assert code == 1 and "exists, left unchanged" in err and "site.db" in err
    assert as_root.read_text() == before
    out = ok("--db", str(tmp_path / "other.db"), "init", "--no-config")
    assert "no config written (--no-config)" in out


def test_read_commands_never_create_a_database_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "sub" / "none.db"
    monkeypatch.setenv("GCTL_CONFIG", str(tmp_path / "gctl.toml"))
    for args in (
        ("node", "ls"),
        ("queue",),
        ("events",),
        ("db", "current"),
        ("show", "job", "1"),
        ("watch",),  # the store is opened before the dashboard starts
        ("daemon",),  # likewise, before the loop
    ):
        for how in ("env", "flag"):
            if how == "env":
                monkeypatch.setenv("GCTL_DB", str(missing))
                code, out, err = run(*args)
            else:
                monkeypatch.delenv("GCTL_DB")
                code, out, err = run("--db", f"sqlite:///{missing}", *args)
            assert code == 1, (args, how, out, err)
            assert "no gctl database" in err and "run 'gctl init' first" in err, (args, err)
            assert not missing.exists() and not missing.parent.exists(), (args, how)


def test_init_never_writes_a_password_into_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "gctl.toml"
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))
    url = "postgresql+psycopg://gctl:s3cret@127.0.0.1:1/gctl"
    code, _, err = run("--db", url, "init")
    assert code == 1 and "s3cret" not in err and "***" in err  # nothing listens on port 1
    assert config.write_starter(cfg, connect(url).config_url)
    text = cfg.read_text()
    assert "s3cret" not in text and "gctl@127.0.0.1:1/gctl" in text


def test_config_file_typo_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "gctl.toml"
    cfg.write_text('[store]\nulr = "x.db"\n')
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))
    monkeypatch.delenv("GCTL_DB", raising=False)
    code, _, err = run("queue")
    assert code == 1 and "unknown key 'ulr'" in err


def test_config_file_nested_too_deeply_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "gctl.toml"
    cfg.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))
    monkeypatch.delenv("GCTL_DB", raising=False)
    code, _, err = run("queue")
    assert code == 1 and "nested too deeply" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_node_of_mixed_emulated_models(gdb: Path) -> None:
    ok("node", "add", "mix", "--host", "10.0.0.3", *FP, "--emulate-gpus", "1xK80-12GB,2xV100-16GB")
    gpus = json.loads(ok("node", "show", "mix", "--json"))["gpus"]
    assert [(g["index"], g["model"]) for g in gpus] == [(0, "K80"), (1, "V100"), (2, "V100")]
    code, _, err = run("node", "add", "bad", "--host", "h", *FP, "--emulate-gpus", "1xK80-12GB,")
    assert code != 0 and "expected COUNTxTYPE-MEMORY" in err and len(err.splitlines()) == 1


def test_node_lifecycle_with_reasons_like_sinfo(gdb: Path) -> None:
    ok("node", "add", "gpu01", "--host", "10.0.0.1", *FP, "--emulate-gpus", "4xV100-16GB")
    ok("node", "add", "gpu02", "--host", "10.0.0.2", *FP, "--emulate-gpus", "8xA100-80GB")
    listing = json.loads(ok("node", "ls", "--json"))
    assert [(n["name"], n["state"], n["gpus_total"]) for n in listing] == [
        ("gpu01", "idle", 4),
        ("gpu02", "idle", 8),
    ]
    assert not any(n["responding"] for n in listing)  # never contacted
    assert "idle*" in ok("node", "ls")
    reason = "fan failure; `reboot` $(id)"
    ok("node", "drain", "gpu01", "--reason", reason)
    drained = json.loads(ok("node", "show", "gpu01", "--json"))
    assert drained["state"] == "drain" and drained["reason"] == reason
    assert drained["reason_user"] == "alice" and drained["gpus"][0]["emulated"] is True
    reasons = ok("node", "ls", "-R")
    assert reason in reasons and "alice" in reasons and "gpu02" not in reasons
    ok("node", "undrain", "gpu01")
    assert json.loads(ok("node", "show", "gpu01", "--json"))["reason"] is None
    code, _, err = run("node", "drain", "gpu01")
    assert code == 1 and "--reason" in err
    ok("node", "rm", "gpu02")
    assert [n["name"] for n in json.loads(ok("node", "ls", "--json"))] == ["gpu01"]
    kinds = [e["kind"] for e in json.loads(ok("events", "--json"))["events"]]
    assert kinds == ["node.add", "node.add", "node.drain", "node.undrain", "node.rm"]


def test_submit_queue_and_actions(gdb: Path) -> None:
    first = ok("submit", "--parsable", "--gpus", "2", "--image", "train:1", "--", "python", "t.py")
    second = ok(
        "submit", "--parsable", "--image", "img", "--elastic", "1:4", "--gpus", "2",
        "--env", "A=1=2", "--mount", "/data:/data:ro", "--gpu-mem", "8G", "--", "sleep", "9",
    )  # fmt: skip
    a, b = int(first), int(second)
    assert b == a + 1
    q = json.loads(ok("queue", "--json"))["jobs"]
    assert [(j["id"], j["state_code"], j["user"]) for j in q] == [
        (a, "PD", "alice"),
        (b, "PD", "alice"),
    ]
    spec = json.loads(ok("show", "job", str(b), "--json"))["spec"]
    assert spec["env"] == {"A": "1=2"} and spec["gpu_mem_mb"] == 8192
    assert spec["mounts"] == [{"src": "/data", "dst": "/data", "read_only": True}]
    assert spec["elastic"] == [1, 4]
    ok("hold", str(b))
    assert ok("queue", "-t", "PD", "-o", "%i %r", "--noheader").splitlines() == [
        f"{a} None",
        f"{b} held by alice",
    ]
    ok("release", str(b))
    assert "cancelled" in ok("cancel", str(a))
    assert [j["id"] for j in json.loads(ok("queue", "--json"))["jobs"]] == [b]
    done = json.loads(ok("queue", "-t", "CA", "--json"))["jobs"]
    assert [(j["id"], j["state"]) for j in done] == [(a, "CANCELLED")]
    code, _, err = run("suspend", str(b))
    assert code == 1 and "suspend needs RUNNING" in err
    code, _, err = run("cancel", str(a))
    assert code == 1 and "already finished" in err


def test_queue_format_widths_and_literals_like_squeue(gdb: Path) -> None:
    ok("submit", "--name", "averyveryverylongname", "--image", "i", "--", "run")
    ok("submit", "--name", "b", "--gpus", "3", "--image", "i", "--", "run")
    out = ok("queue", "-o", "{%.3i}|%6j|%.4b|%5j|%%|%t", "--noheader")
    assert out.splitlines() == [
        "{  1}|averyv|   1|avery|%|PD",
        "{  2}|b     |   3|b    |%|PD",
    ]
    header = ok("queue", "-o", "%.5i %j %T").splitlines()[0]
    assert header == "JOBID NAME STATE"
    assert ok("queue", "-o", "plain text", "--noheader").splitlines() == ["plain text"] * 2
    code, _, err = run("queue", "-o", "%i %Z")
    assert code == 2 and "unknown field %Z" in err
    submitted = json.loads(ok("queue", "--json"))["jobs"][0]["submit_time"]
    assert datetime.fromisoformat(submitted).utcoffset() == timedelta(0)
    assert abs(datetime.fromisoformat(submitted).timestamp() - time.time()) < 60


def test_emulated_gpus_from_a_spec_file_with_topology(gdb: Path, tmp_path: Path) -> None:
    spec = tmp_path / "dgx.toml"
    spec.write_text(
        '[[nodes]]\ngpus = 8\ngpu_type = "V100"\ngpu_memory = "32GB"\ntopology = "nvlink"\n'
    )
    ok("node", "add", "dgx1", "--host", "10.0.0.9", *FP, "--emulate-gpus", str(spec))
    node = json.loads(ok("node", "show", "dgx1", "--json"))
    assert node["gpu_kinds"] == "8xV100-32GB"
    assert [g["uuid"] for g in node["gpus"]][:2] == ["GPU-emulated-dgx1-0", "GPU-emulated-dgx1-1"]
    peers = _rows(gdb, 'SELECT nvlink_peers FROM gpus WHERE "index" = 0')[0][0]
    assert json.loads(str(peers))  # the DGX-1 mesh, not the PCIe default
    spec.write_text("[[nodes]]\ncount = 2\ngpus = 4\n")
    code, _, err = run("node", "add", "two", "--host", "h", *FP, "--emulate-gpus", str(spec))
    assert code == 1 and "give exactly one" in err


def test_actions_on_running_jobs_become_intents_for_the_daemon(gdb: Path) -> None:
    ok("node", "add", "n1", "--host", "h", *FP, "--emulate-gpus", "2xV100-16GB")
    job = int(ok("submit", "--parsable", "--image", "x", "--", "run"))
    with sqlite3.connect(gdb) as conn:  # what the daemon will do when it places the job
        conn.execute("UPDATE jobs SET state='RUNNING' WHERE id=?", (job,))
        conn.execute(
            "INSERT INTO allocations (job_id, gpu_id, mode, since)"
            " VALUES (?, 1, 'exclusive', '2026-01-01')",
            (job,),
        )
    out = ok("suspend", str(job))
    assert "recorded for the daemon; no daemon holds this store now" in out
    with sqlite3.connect(gdb) as conn:  # a daemon holding the store: nothing more to say
        conn.execute(
            "INSERT INTO daemon_lease (id, holder, pid, epoch, started_at, heartbeat_at)"
            " VALUES (1, 'elsewhere:1', 1, 1, ?, ?)",
            (time.time(), time.time()),
        )
    assert ok("migrate", str(job), "--to", "n1:1").strip().endswith("recorded for the daemon")
    code, _, err = run("migrate", str(job), "--to", "n1:7")
    assert code == 1 and "no GPU '7'" in err
    code, _, err = run("migrate", str(job), "--to", "nowhere")
    assert code == 1 and "unknown node 'nowhere'" in err
    intents = _rows(gdb, "SELECT kind, status, user FROM intents ORDER BY id")
    assert intents == [("suspend", "pending", "alice"), ("migrate", "pending", "alice")]
    assert json.loads(ok("queue", "-w", "n1", "--json"))["jobs"][0]["nodes"] == ["n1"]
    assert json.loads(ok("queue", "-w", "other", "--json"))["jobs"] == []
    assert json.loads(ok("node", "show", "n1", "--json"))["state"] == "mix"
    code, _, err = run("node", "rm", "n1")
    assert code == 1 and "still runs jobs" in err


def test_batch_submission_is_all_or_nothing(gdb: Path, tmp_path: Path) -> None:
    good = tmp_path / "jobs.jsonl"
    good.write_text(
        '{"image": "a", "command": ["x"], "gpus": 1}\n'
        "# comment lines are skipped\n"
        '{"image": "b", "command": ["y", "z"], "gpus": 2, "priority": "high"}\n'
    )
    assert ok("submit", "-f", str(good)).startswith("Submitted 2 jobs")
    toml = tmp_path / "jobs.toml"
    toml.write_text('[[job]]\nimage = "c"\ncommand = ["q"]\ngpus = 1\n')
    ok("submit", "-f", str(toml))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"image": "a", "command": ["x"], "gpus": 1}\n{"image": "a", "command": ["x"], "gpu": 1}\n'
    )
    code, _, err = run("submit", "-f", str(bad))
    assert code == 1
    assert err.strip() == (f"gctl: error: {bad}:2: unknown key 'gpu' (did you mean 'gpus'?)")
    assert _rows(gdb, "SELECT COUNT(*) FROM jobs") == [(3,)]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["submit", "--gpus", "0", "--image", "x", "--", "a"], "--gpus 0"),
        (["submit", "--gpus", "-1", "--image", "x", "--", "a"], "--gpus -1"),
        (["submit", "--gpu-mem", "12Q", "--image", "x", "--", "a"], "--gpu-mem '12Q'"),
        (["submit", "--mount", "/a", "--image", "x", "--", "a"], "--mount '/a'"),
        (["submit", "--image", "bad image", "--", "a"], "--image 'bad image'"),
        (["submit", "--image", "x", "--priority", "urgent", "--", "a"], "--priority 'urgent'"),
        (["submit", "--image", "x", "--elastic", "3:2", "--", "a"], "--elastic '3:2'"),
        (["submit", "--image", "x", "--env", "1A=b", "--", "a"], "--env '1A=b'"),
        (["submit", "--image", "x", "--env", "GCTL_EMULATED_UTIL=120", "--", "a"], "0 to 100"),
        (["submit", "--image", "x", "--env", "GCTL_EMULATED_GPU_MEM=4G", "--", "a"], "of MiB"),
        (["submit", "--image", "x"], "command"),
        # Specs no container can ever run: refused now rather than retried by the daemon.
        (["submit", "--image", "x", "--", ""], "command: the program to run"),
        (["submit", "--image", "x", "--", "", "a"], "command: the program to run"),
        (["submit", "--image", "x", "--", "a\x00b"], "command: argument 1: NUL"),
        (["submit", "--image", "x", "--", "a", "\udcff"], "command: argument 2: not valid UTF-8"),
        (["submit", "--image", "x", "--env", "A=b\x00", "--", "a"], "--env 'A=b\\x00': NUL"),
        (["submit", "--image", "x", "--env", "A=\udcff", "--", "a"], "not valid UTF-8"),
        (["submit", "--image", "x", "--name", "n\x00", "--", "a"], "--name: NUL"),
        (["submit", "--image", "x", "--name", "\udcff", "--", "a"], "--name: not valid UTF-8"),
        (["submit", "--image", "x", "--dataset", "d\x00", "--", "a"], "--dataset 'd\\x00': NUL"),
        (["submit", "--image", "x", "--dataset", "d:/gctl/x", "--", "a"], "/gctl is reserved"),
        (["submit", "--image", "x", "--dataset", "d:rel", "--", "a"], "an absolute path"),
        (["submit", "--image", "x", "--profile", "\udcff", "--", "a"], "--profile: not valid"),
        (["submit", "--image", "x\n", "--", "a"], "--image 'x\\n'"),
        (["submit", "--image", "x", "--mount", "/a\x00:/b", "--", "a"], "NUL"),
        (["submit", "--image", "x", "--mount", "/a:/b\udcff", "--", "a"], "not valid UTF-8"),
        (["submit", "--image", "x", "--mount", "/tmp:/", "--", "a"], "root /"),
        (["submit", "--image", "x", "--mount", "/tmp:/x/..", "--", "a"], "root /"),
        (
            ["submit", "--image", "x", "--mount", f"/tmp:{JOB_DIR_IN_CONTAINER}", "--", "a"],
            "reserved",
        ),
        (["submit", "--image", "x", "--mount", "/tmp://gctl/", "--", "a"], "/gctl is reserved"),
        (
            ["submit", "--image", "x", "--mount", "/tmp:/gctl/ckpt:ro", "--", "a"],
            "/gctl is reserved",
        ),
        (["submit", "--image", "x", "--mount", "/tmp:/a/../gctl", "--", "a"], "/gctl is reserved"),
        (
            ["submit", "--image", "x", "--mount", f"/t:{GPU_DIR_IN_CONTAINER}/0", "--", "a"],
            "reserved",
        ),
        (
            ["submit", "--image", "x", "--mount", "/a:/d", "--mount", "/b:/d/", "--", "a"],
            "two mounts onto /d",
        ),
        (["queue", "-t", "XX"], "-t 'XX'"),
        (["queue", "-o", "%i %Z"], "unknown field %Z"),
    ],
)
def test_bad_values_are_one_line_usage_errors_and_change_nothing(
    gdb: Path, args: list[str], needle: str
) -> None:
    """A value gctl refuses by itself, before opening the store: exit 2, as Typer's errors."""
    _refused_once(gdb, args, needle, 2)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["submit", "--image", "x", "--dataset", "nope", "--", "a"], "unknown dataset 'nope'"),
        (["dataset", "add", "d", "data/x"], "expected NODE:/absolute/path or an rsync location"),
        (["dataset", "add", "d", "gpu9:/data"], "no node in service to fetch it with"),
        (["dataset", "add", "d", "rsync://mirror/data/x", "--via", "gpu9"], "unknown node 'gpu9'"),
        (["show", "job", "999"], "unknown job 999"),
        (["node", "show", "ghost"], "unknown node 'ghost'"),
        (["node", "add", "bad name", "--host", "h", *FP], "node name 'bad name'"),
        (["node", "add", "n", "--host", "gpu01..example.com", *FP], "--host 'gpu01..example.com'"),
        (["node", "add", "n", "--host", "gpu01..example.com"], "--host 'gpu01..example.com'"),
        (["node", "add", "n", "--host", "10.0.0.256", *FP], "not an IP address or a host name"),
        (["node", "add", "n", "--host", "a_\udcff", *FP], "--host 'a_\\udcff'"),
        (["node", "add", "n", "--host", "x" * 64 + ".example.com", *FP], "--host"),
        (["node", "add", "n", "--host", "h", *FP, "--emulate-gpus", "4xV100"], "--emulate-gpus"),
        (["node", "add", "n", "--host", "h", "--host-key-fingerprint", "MD5:aa"], "SHA256:"),
    ],
)
def test_what_the_store_refuses_is_one_line_exit_1_and_changes_nothing(
    gdb: Path, args: list[str], needle: str
) -> None:
    """An unknown job, node or dataset, a node's address or key refused as it is recorded."""
    _refused_once(gdb, args, needle, 1)


def _refused_once(gdb: Path, args: list[str], needle: str, expected: int) -> None:
    ok("submit", "--image", "keep", "--", "me")
    before = _rows(gdb, "SELECT * FROM jobs"), _rows(gdb, "SELECT * FROM nodes")
    code, out, err = run(*args)
    assert code == expected, (code, err)
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("gctl: error: ")
    assert needle in err
    assert (_rows(gdb, "SELECT * FROM jobs"), _rows(gdb, "SELECT * FROM nodes")) == before


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        (
            "nul.jsonl",
            '{"image": "i", "command": ["a\\u0000"], "gpus": 1}',
            "command: argument 1: NUL",
        ),
        (
            "env.jsonl",
            '{"image": "i", "command": ["a"], "gpus": 1, "env": {"A": "\\udcff"}}',
            "UTF-8",
        ),
        ("name.json", '[{"image": "i", "command": ["a"], "gpus": 1, "name": "\\udcff"}]', "--name"),
        ("empty.toml", '[[job]]\nimage = "i"\ncommand = [""]\ngpus = 1\n', "program to run"),
        (
            "mnt.toml",
            '[[job]]\nimage = "i"\ncommand = ["a"]\ngpus = 1\nmounts = ["/t:/gctl"]\n',
            "reserved",
        ),
        (
            "bytes.jsonl",
            '{"image": "i", "command": ["\udcff"], "gpus": 1}',
            "bytes.jsonl:2: not valid UTF-8",
        ),
        (
            "envkey.jsonl",
            '{"image": "i", "command": ["x"], "gpus": 1, "env": {"A=B": "1"}}',
            "envkey.jsonl:2: env key 'A=B': expected KEY=VALUE with KEY a shell-style name",
        ),
        ("deep.json", "[" * 1001 + "]" * 1001, "deep.json: nested too deeply to be a job spec"),
        ("deep.jsonl", '{"env": ' + "[" * 5000 + "]" * 5000 + "}", "deep.jsonl:2: nested too"),
        ("deep.toml", "job = " + "[" * 5000 + "]" * 5000, "deep.toml: nested too deeply"),
        (
            "bigint.jsonl",
            '{"image": "i", "command": ["x"], "gpus": ' + "9" * 5000 + "}",
            "Exceeds the limit (4300 digits)",
        ),
        (
            "huge.toml",
            '[[job]]\nimage = "i"\ncommand = ["x"]\ngpus = 2147483648\n',
            "job 1: --gpus 2147483648: must be a whole number from 1 to 65,536",
        ),
    ],
)
def test_batch_files_refuse_specs_that_can_never_run(
    gdb: Path, tmp_path: Path, name: str, content: str, needle: str
) -> None:
    batch = tmp_path / name
    good = '{"image": "i", "command": ["a"], "gpus": 1}\n' if name.endswith(".jsonl") else ""
    # surrogateescape writes the lone surrogate of bytes.jsonl as the byte 0xff.
    batch.write_bytes((good + content).encode("utf-8", "surrogateescape"))
    code, out, err = run("submit", "-f", str(batch))
    assert (code, out) == (1, ""), err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"gctl: error: {batch}")
    assert needle in err
    assert _rows(gdb, "SELECT COUNT(*) FROM jobs") == [(0,)]


@pytest.mark.parametrize("header", [False, True], ids=["pages", "header"])
def test_a_ruined_store_file_is_a_one_line_error(gdb: Path, header: bool) -> None:
    store = connect(str(gdb))
    many = [specs.build(image="i", command=["run", str(i) * 40], gpus=1) for i in range(600)]
    jobs.submit(store, many)
    store.engine.dispose()
    ruin(gdb, 40, header=header)
    for args in (["submit", "--image", "i", "--", "x"], ["queue"], ["show", "job", "1"]):
        code, out, err = run(*args)
        assert (code, out) == (1, ""), (args, err)
        assert len(err.strip().splitlines()) == 1, (args, err)
        assert err.startswith("gctl: error: ")
        assert "not a database" in err if header else "malformed" in err


def test_usage_errors_exit_2(gdb: Path) -> None:
    assert run("queue", "--bogus")[0] == 2
    assert run("cancel")[0] == 2
    assert run("cancel", "abc")[0] == 2


TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flag=st.sampled_from(["--gpu-mem", "--mount", "--env", "--image", "--elastic", "--priority"]),
    value=TEXT,
)
def test_random_flag_values_never_crash_and_never_half_store(
    gdb: Path, flag: str, value: str
) -> None:
    before = _rows(gdb, "SELECT COUNT(*) FROM jobs")[0][0]
    args = ["submit", "--image", "img", flag, value, "--", "run"]
    if flag == "--image":
        args = ["submit", "--image", value, "--", "run"]
    code, out, err = run(*args)
    after = _rows(gdb, "SELECT COUNT(*) FROM jobs")[0][0]
    # A flag's value that cannot be used is a usage error (exit 2), as a missing one is; a
    # well-formed mount may still be one the site does not allow (exit 1).
    assert code in ((0, 1, 2) if flag == "--mount" else (0, 2)), err
    if code == 0:
        assert after == before + 1 and out.startswith("Submitted job")
    else:
        assert after == before
        assert len(err.strip().splitlines()) == 1 and err.startswith("gctl: error: ")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(argv=st.lists(TEXT, min_size=1, max_size=5).filter(lambda a: a[0] != ""), name=TEXT)
def test_text_is_stored_byte_for_byte(gdb: Path, argv: list[str], name: str) -> None:
    clean_name = "".join(c for c in name if ord(c) >= 32 and not 127 <= ord(c) < 160)
    job = int(ok("submit", "--parsable", "--image", "i", "--name", clean_name, "--", *argv))
    shown = json.loads(ok("show", "job", str(job), "--json"))
    assert shown["spec"]["command"] == argv
    assert shown["name"] == (clean_name or argv[0].rsplit("/", 1)[-1])
    ok("hold", str(job))
    events = json.loads(ok("events", "--job", str(job), "--json"))["events"]
    assert [e["kind"] for e in events] == ["job.submit", "job.hold"]
