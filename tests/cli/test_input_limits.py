"""Input limits at the CLI: numbers, sizes, nesting, anchors, signals and bulk outcomes."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import pytest
from clikit import ok, run

from gctl.services import specs

FP = "SHA256:" + "A" * 43


def _rows(db: Path) -> list[list[tuple[object, ...]]]:
    with sqlite3.connect(db) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [conn.execute(f'SELECT * FROM "{t}"').fetchall() for t in sorted(tables)]


def _refused(db: Path, *args: str, code: int = 1) -> str:
    """The one error line of a refused command, which changed nothing stored."""
    before = _rows(db)
    got, out, err = run(*args)
    assert (got, out) == (code, ""), err
    assert len(err.splitlines()) == 1 and err.startswith("gctl: error: "), err
    assert _rows(db) == before
    return err.removeprefix("gctl: error: ").rstrip("\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "2147483648"], "--gpus 2147483648: must be a whole number from 1 to 65,536"),
        (["--gpus", "65537"], "--gpus 65537: must be a whole number from 1 to 65,536"),
        (["--gpu-mem", "9" * 30 + "G"], "must be from 1M to 1T"),
        (["--gpu-mem", "2T"], "--gpu-mem '2T': must be from 1M to 1T"),
        (["--elastic", "1:99999999999"], "expected MIN:MAX"),
        (["--elastic", "1:²"], "--elastic '1:²': expected MIN:MAX"),
        (["--name", "n" * 256], "--name: 256 characters, more than the 255 allowed"),
        (["--name", "a\x9bb"], "--name: control characters are not allowed"),
        (["--env", "A\n=b"], "KEY a shell-style name"),
        (["--env", "A=" + "v" * 200_000], "more than the 131,072 allowed"),
    ],
)
def test_submit_refuses_values_over_the_limits(gdb: Path, args: list[str], message: str) -> None:
    assert message in _refused(gdb, "submit", "--image", "i", *args, "--", "run", code=2)


def test_a_command_over_its_size_is_refused(gdb: Path) -> None:
    err = _refused(gdb, "submit", "--image", "i", "--", "run", "a" * 70_000, "b" * 70_000, code=2)
    assert err == "command: 140,006 bytes, more than the 131,072 allowed"


def test_the_default_name_is_cut_to_a_name_s_length(gdb: Path) -> None:
    job = ok("submit", "--parsable", "--image", "i", "--", "/bin/" + "p" * 300).strip()
    assert json.loads(ok("show", "job", job, "--json"))["name"] == "p" * 255


def test_a_batch_file_over_the_size_limit_is_not_read(
    gdb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(specs, "BATCH_BYTES_MAX", 100)
    batch = tmp_path / "big.jsonl"
    batch.write_text('{"image": "i", "command": ["x"], "gpus": 1}\n' * 3)
    assert _refused(gdb, "submit", "-f", str(batch)) == f"{batch}: larger than 0 MiB; split it"


@pytest.mark.parametrize(
    "args",
    [
        ["node", "add", "a\n", "--host", "h", "--host-key-fingerprint", FP],
        ["node", "add", "a", "--host", "h", "--host-key-fingerprint", FP + "\n"],
        ["node", "add", "a", "--host", "h", "--host-key-fingerprint", FP, "--user", "u" * 256],
        ["node", "add", "a", "--host", "h", "--host-key-fingerprint", FP, "--work-dir", "/\x00"],
    ],
)
def test_node_values_are_anchored_and_bounded(gdb: Path, args: list[str]) -> None:
    _refused(gdb, *args)


def test_queue_format_widths_are_capped(gdb: Path) -> None:
    ok("submit", "--image", "i", "--", "run")
    err = _refused(gdb, "queue", "-o", "%.999999999i", code=2)
    assert err == "--format: %.999999999i is wider than 1024 characters"
    too_long = _refused(gdb, "queue", "-o", "%i" * 600, code=2)
    assert too_long == "--format: more than 1024 characters"
    assert ok("queue", "-h", "-o", "%.1024i") == " " * 1023 + "1\n"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["events", "--limit", "2147483648"], 2),
        (["events", "--since", "9" * 400], 2),
        (["events", "--since", "36501d"], 2),
        (["events", "--job", "2147483648"], 2),
        (["show", "job", "99999999999999999999"], 2),
        (["logs", "1", "--tail", "2147483648"], 2),
        (["defrag", "--max-moves", "2147483648"], 2),
        (["watch", "--interval", "nan"], 2),
        (["daemon", "--tick", "inf"], 2),
        (["daemon", "-o", "quantum=nan"], 2),
        (["sim", "run", "t.csv", "--seed", "-1"], 2),
        (["queue", "--bogus"], 2),
    ],
)
def test_numbers_are_bounded_and_usage_errors_are_one_line(
    gdb: Path, args: list[str], code: int
) -> None:
    _refused(gdb, *args, code=code)


def test_cancel_takes_only_signals_a_process_can_be_sent(gdb: Path) -> None:
    job = ok("submit", "--parsable", "--image", "i", "--", "run").strip()
    for bad in ("BOGUS", "0", "65", "SIG", "-9", "TERM\n"):
        refused = _refused(gdb, "cancel", "--signal", bad, job, code=2)
        assert refused.startswith(f"--signal {bad!r}")


def test_a_bulk_action_acts_on_each_job_and_reports_each_refusal(gdb: Path) -> None:
    a, b = ok("submit", "--parsable", "--image", "i", "--", "run").strip(), "999999"
    c = ok("submit", "--parsable", "--image", "i", "--", "run").strip()
    code, out, err = run("cancel", a, b, c)
    assert (code, out) == (1, f"job {a} cancelled\njob {c} cancelled\n")
    assert err == "gctl: error: unknown job 999999\n"
    states = {j["id"]: j["state"] for j in json.loads(ok("queue", "-t", "all", "--json"))["jobs"]}
    assert states == {int(a): "CANCELLED", int(c): "CANCELLED"}
    d = ok("submit", "--parsable", "--image", "i", "--", "run").strip()
    code, out, err = run("hold", a, d, "--json")
    assert code == 1 and err == f"gctl: error: job {a} already finished (CANCELLED)\n"
    doc = json.loads(out)
    assert [r["job_id"] for r in doc["results"]] == [int(d)]
    assert doc["errors"] == [{"job_id": int(a), "error": f"job {a} already finished (CANCELLED)"}]


def test_a_node_that_does_not_answer_is_named_in_one_error_line(gdb: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    where = ("--host", "127.0.0.1", "--port", port, "--host-key-fingerprint", FP)
    ok("node", "add", "gone", *where, "--emulate-gpus", "1xV100-16GB")
    for command in ("probe", "top"):
        code, out, err = run("node", command)
        assert code == 1 and "gone" in out
        assert err == "gctl: error: no answer from 1 node(s): gone\n"


def test_cancel_chooses_jobs_by_user_state_and_name_as_scancel_does(gdb: Path) -> None:
    a = ok("submit", "--parsable", "--image", "i", "--name", "sweep", "--", "run").strip()
    b = ok("submit", "--parsable", "--image", "i", "--name", "keep", "--", "run").strip()
    c = ok("submit", "--parsable", "--image", "i", "--name", "sweep", "--", "run").strip()
    ok("hold", c)
    me = json.loads(ok("show", "job", a, "--json"))["user"]
    code, out, err = run("cancel", "--name", "sweep", "-u", me, "--json")
    assert code == 0, err
    assert sorted(r["job_id"] for r in json.loads(out)["results"]) == sorted([int(a), int(c)])
    code, out, _ = run("cancel", "-u", "nobody-here")
    assert (code, out) == (0, "")  # nothing matched: nothing done, as scancel
    code, out, _ = run("cancel", b, a, "-t", "PD")  # ids and a filter: the ids that match
    assert (code, out) == (0, f"job {b} cancelled\n")  # a is finished: not pending
    code, _, err = run("cancel")
    assert code == 2 and err.startswith("gctl: error: give job ids, or choose jobs with -u")
    states = {j["id"]: j["state"] for j in json.loads(ok("queue", "-t", "all", "--json"))["jobs"]}
    assert set(states.values()) == {"CANCELLED"}
