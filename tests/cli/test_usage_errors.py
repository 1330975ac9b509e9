"""A command line gctl cannot use is one line on stderr, ``gctl: error: ...``, and exit 2.

As the README and ``gctl(1)`` say: exit 2 for an unknown command or option,
a missing argument, a value of the wrong type, out of range or not among the
choices, found before the command does anything (no store is opened: none
exists here); exit 1 for what the store, a file or a host refuses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from clikit import run

GCTL = Path(sys.executable).with_name("gctl")
TRACE = Path(__file__).resolve().parents[2] / "traces" / "philly-sample.csv"
SUBMIT = ("submit", "--image", "img")


@pytest.fixture(autouse=True)
def no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that does not exist: a usage error is found before any is opened."""
    monkeypatch.setenv("GCTL_DB", str(tmp_path / "none" / "gctl.db"))
    monkeypatch.setenv("GCTL_CONFIG", str(tmp_path / "none.toml"))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("bogus",), "No such command 'bogus'"),
        (("queue", "--bogus"), "No such option: --bogus"),
        (("node", "ls", "--json", "-x"), "No such option: -x"),
        (("show", "job"), "Missing argument 'JOB_ID'"),
        (("node", "rm"), "Missing argument 'NODE'"),
        (("--db",), "Option '--db' requires an argument"),
        (("show", "job", "abc"), "Invalid value for 'JOB_ID'"),
        (("cancel", "0"), "Invalid value for 'JOB_ID'"),
        (("events", "--limit", "0"), "Invalid value for '--limit'"),
        (("cancel",), "give job ids, or choose jobs"),
        ((*SUBMIT, "--priority", "urgent", "--", "x"), "--priority 'urgent': choose one of"),
        ((*SUBMIT, "--class", "batch", "--", "x"), "--class 'batch': choose one of"),
        ((*SUBMIT, "--gpu-mem", "8Q", "--", "x"), "--gpu-mem '8Q'"),
        ((*SUBMIT, "--env", "NOEQUALS", "--", "x"), "--env 'NOEQUALS'"),
        (("submit", "--", "x"), "--image is required"),
        (("queue", "-t", "bogus"), "unknown job state"),
        (("queue", "-o", "%Z"), "unknown field %Z"),
        (("events", "--since", "5x"), "--since '5x': not a time"),
        (("cancel", "-s", "NOSIG", "1"), "not a signal"),
        (("logs", "1", "--json", "--follow"), "cannot --follow"),
        (("sim", "run", str(TRACE), "--policy", "nosuch"), "unknown policy 'nosuch'"),
        (("sim", "run", str(TRACE), "-o", "noequals"), "use KEY=VALUE"),
        (("sim", "run", str(TRACE), "--window", "5h:1h"), "END must be after START"),
        (("sim", "run", str(TRACE), "--compare", "fifo,fifo"), "named twice"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
def test_usage_errors_are_one_line_and_exit_2(args: tuple[str, ...], says: str) -> None:
    code, out, err = run(*args)
    assert (code, out) == (2, ""), err
    assert err.startswith("gctl: error: ") and err.count("\n") == 1, err
    assert says in err


def test_what_the_store_refuses_is_exit_1_not_a_usage_error() -> None:
    code, out, err = run("cancel", "1")
    assert (code, out) == (1, "")
    assert err.startswith("gctl: error: no gctl database at ") and err.count("\n") == 1


def test_the_console_script_through_pipes() -> None:
    """The installed command, not a terminal on either side: the same one line, exit 2."""
    out = subprocess.run(
        [str(GCTL), "submit", "--image", "img", "--priority", "urgent", "--", "x"],
        env={**os.environ, "COLUMNS": "80"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == "gctl: error: --priority 'urgent': choose one of low, normal, high\n"
