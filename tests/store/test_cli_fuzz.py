"""Every gctl command against hostile input, on SQLite and on PostgreSQL.

The commands and their options are enumerated from the Typer app, so a new
command or option is fuzzed without a line here. Each run goes through the
real entry point in-process (:func:`clikit.run`) against a store holding
nodes, jobs in every kind of state and hostile text, and must keep the rules
of :func:`check`: exit code 0, 1 or 2 and never a traceback; an error is one
line ``gctl: error: ...`` (a bulk action: one line per refused job); nothing
printed outside JSON can act on a terminal; ``--json`` output parses; a
refusal leaves every table of the store as it was.

Hosts: every node is 127.0.0.1 on a port nothing listens on, so what reaches
hosts (``node probe``/``top``/``rekey``, ``logs``, ``defrag``, ``node add``
without a fingerprint) is refused a connection at once; host names and
addresses come from fixed lists (never a name a resolver would look up).
What runs until stopped runs its input parsing and set-up only: the daemon's
loop, the dashboard and ``events --follow``'s wait return at once here.
Files that could be written (``--db``, ``db copy --to``) are relative names
in the test's own directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import threading
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from clikit import ok, run, unsafe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import URL, Engine, select
from storekit import on_gpus

import gctl.cli.jobs
from gctl.cli.main import app
from gctl.services import db
from gctl.store import engine as store_engine
from gctl.store.models import Base

FP = "SHA256:" + "A" * 43
OTHER_FP = "SHA256:" + "B" * 43
BULK = {("cancel",), ("suspend",), ("resume",), ("hold",), ("release",), ("requeue",)}
"""Commands that act on each job given and report each refusal in a line of its own."""
REPORTS = {("node", "probe"), ("node", "top")}
"""Commands that exit 1 when a host did not answer, after showing every answer."""

TEXT_CASES = [
    *("", " ", "-", "--", "-x", "a\n", "\n", "\x00", "a\x00b", "\t", "\r", "\x7f"),
    *("\x1b[2J", "\x1b]0;pwned\x07", "\x9b2J", "\u202e", "\u2066x\u2069", "\u200d", "\ufeff"),
    *("[/bold]", "[red]x", "%", "%s%n", "$(id)", "'", '"', "\\", "é", "😀", "\udcff", "٣"),
    *("²", "/", "//", "../x", "A=B", "=", ":", "::", "a:b:c:d", ",", ",,", "1:", "1:0", "x" * 256),
    *("x" * 5000, "9" * 5000, "-1", "0", "2147483648", "1e309", "nan", "inf"),
    *(FP, FP + "\n", "n\u0663"),
]
"""Crafted text: controls, bidi, markup, format characters, numbers too big, limits passed."""
INT_CASES = [
    *("0", "1", "-1", "2", "3", "2147483647", "2147483648", "-2147483649"),
    *("9223372036854775808", "9" * 30, "9" * 5000, "1_0", " 3 ", "٣", "0x10", "1e3", ""),
]
FLOAT_CASES = ["0", "-1", "0.001", "1e309", "inf", "-inf", "nan", "1e-320", "604800", "604801"]
POOLS: dict[str, list[str]] = {
    "signal": ["TERM", "sigkill", "9", "64", "65", "0", "BOGUS", "RTMIN", "SIG", "-9"],
    "fmt": [
        *("%i %j", "%.999999999i", "%.1024i %j", "%.1025i", "%٣i", "%i" * 600, "%Z", "%", "%%"),
        *(
            "%9999999999999999999999i",
            "\x1b[2J%i",
            "%.8i %.2t %.10M %R %r %V %S %b %p %N %T %u",
            "%P",
        ),
    ],
    "states": ["PD,R", "all", "XX", "pd", ",", "CA,CD,F"],
    "gpu_mem": ["8G", "16GiB", "512M", "0", "1e400", "9" * 400, "1048577M", "1T", "2T", "٣G"],
    "elastic": ["1:4", "0:1", "٣:٤", "1:2147483648", "99999999999:1", "2:1", "1:65536"],
    "since": ["30m", "2h", "7d", "0", "1e400", "9" * 30, "36501d", "-1", "1 h"],
    "window": ["0:7d", "2h:1h", "0:36501d", ":", "0:", "a:b"],
    "option": ["quantum=30", "quantum=nan", "quantum=inf", "x=1", "=1", "max_height=1e999"],
    "policy": ["gandiva", "fifo", "backfill", "nope"],
    "cluster": ["2x8", "1x1", "0x8", "10001x8", "2x65", "2x8:A100-80GB", "999999999x99"],
    "emulate_gpus": ["2xV100-16GB", "0xV100-16GB", "99xV100-16GB", "4xV100", "٣xV100-16GB"],
    "metrics": ["127.0.0.1:0", ":0", "[::1]:0", "x", "127.0.0.1:99999", "127.0.0.1:²"],
    "host": ["127.0.0.1", "::1", "a..b", "-h", "a b", "10.0.0.256", "x" * 300, "127.0.0.1\n"],
    "host_key_fingerprint": [FP, OTHER_FP, FP + "\n", "MD5:aa", "SHA256:short"],
    "db": ["fresh.db", "sub/dir.db", "foo://x", "sqlite:///:memory:", "x\x00y", "x" * 5000],
    "mount": ["/data:/data:ro", "/a:/", "/a:/gctl", "/a", "a:b", "/a:/b:rx", "/a\x00:/b"],
    "env": ["A=1", "A=B=C", "1A=b", "A\n=b", "A", "GCTL_EMULATED_UTIL=120", "A=\x00"],
    "command": ["python", "t.py", "\x1b]0;pwned\x07", "", "x" * 200_000],
    "node": ["dead1", "dead2", "dead1:0", "dead1:9", "dead1:²", "dead1:0,0", "ghost"],
}
"""Values for options whose free text could reach outside the test (hosts, files), or that
need values of their own to get past the first check."""
POOL_NAMES = {"nodelist": "node", "to": "node"}
"""Options drawn from another option's values."""


def _closed_port() -> int:
    """A local port nothing listens on: connecting to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Site:
    """The store under test, what it holds, and the files commands may be given."""

    engine: Engine
    jobs: list[str]
    nodes: list[str]
    files: list[str]
    port: int
    opened: list[Engine]
    """Engines the commands run so far opened (a process would close them as it ends)."""


def _files(tmp: Path) -> list[str]:
    """Batch, trace and spec files, good and hostile."""
    spec = '{"image": "i", "command": ["x"], "gpus": 1'
    made = {
        "good.jsonl": spec + "}\n",
        "array.json": "[" + spec + "}]",
        "deep.json": "[" * 5000 + "]" * 5000,
        "deep.jsonl": '{"a": ' + "[" * 5000 + "]" * 5000 + "}\n",
        "deep.toml": "job = " + "[" * 5000 + "]" * 5000 + "\n",
        "bigint.jsonl": spec.replace('"gpus": 1', '"gpus": ' + "9" * 5000) + "}\n",
        "huge.toml": '[[job]]\nimage = "i"\ncommand = ["x"]\ngpus = 2147483648\n',
        "envkey.jsonl": spec + ', "env": {"A=B": "1"}}\n',
        "nul.jsonl": spec + ', "name": "a\\u0000"}\n',
        "escape.jsonl": spec + ', "command": ["\\u001b]0;pwned\\u0007"]}\n',
        "tiny.csv": "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,"
        "interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"
        "0,4,0,1000,resnet18,128,100000000,1000,921,723,113,73,0\n"
        "1,2,1000000,1000,bert,4,50000000,1000,190,0.5,163,18,1\n",
        "one.toml": '[[nodes]]\ncount = 1\ngpus = 2\ntopology = "nvlink"\n',
    }
    for name, text in made.items():
        (tmp / name).write_text(text)
    (tmp / "latin1.jsonl").write_bytes(b'{"image": "\xff", "command": ["x"], "gpus": 1}\n')
    return [*made, "latin1.jsonl", "/dev/null", ".", "missing.jsonl", "a\x00b"]


@contextlib.contextmanager
def _stopped() -> Iterator[threading.Event]:
    """``events --follow``'s stop request, already made: it prints what there is and returns."""
    stop = threading.Event()
    stop.set()
    yield stop


@pytest.fixture(scope="module")
def site(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A store with nodes, jobs pending, held, running, suspended and ended, and hostile text."""
    tmp = tmp_path_factory.mktemp("fuzz")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp)
        patch.setenv("GCTL_DB", module_db_url)
        patch.setenv("GCTL_CONFIG", str(tmp / "gctl.toml"))
        patch.setenv("GCTL_USER", "alice")
        patch.setattr("gctl.daemon.loop.Daemon.run", lambda *args, **kwargs: None)
        patch.setattr("gctl.watch.app.WatchApp.run", lambda *args, **kwargs: None)
        patch.setattr(gctl.cli.jobs, "stop_requested", _stopped)
        opened: list[Engine] = []

        def make_engine(url: URL) -> Engine:
            opened.append(store_engine.make_engine(url))
            return opened[-1]

        patch.setattr(db, "make_engine", make_engine)
        port = _closed_port()
        ok("init")
        for name, gpus in (("dead1", "4xV100-16GB"), ("dead2", "2xA100-40GB")):
            where = ("--host", "127.0.0.1", "--port", str(port), "--host-key-fingerprint", FP)
            ok("node", "add", name, *where, "--emulate-gpus", gpus)
        ok("node", "drain", "dead2", "--reason", "\x1b[2J fan \u202e [/bold]")
        files = _files(tmp)
        ids = ok("submit", "--parsable", "-f", "escape.jsonl").split()
        for name in ("train", "[red]x", "evil\u202etxt"):
            ids += ok("submit", "--parsable", "--image", "i", "--name", name, "--", "x").split()
        store = db.connect(module_db_url)
        on_gpus(store, int(ids[1]), "dead1", [0, 1], since=1.0)
        on_gpus(store, int(ids[2]), "dead1", [2], since=1.0, state="SUSPENDED")
        ok("hold", ids[3])
        ok("cancel", ids[0])
        yield Site(store.engine, ids, ["dead1", "dead2"], files, port, opened)
        store.engine.dispose()


def _dump(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in key order."""
    with engine.connect() as conn:
        return {
            t.name: [tuple(r) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]
            for t in Base.metadata.sorted_tables
        }


def check(site: Site, argv: list[str]) -> tuple[int, str, str]:
    """Run ``gctl ARGV`` and hold it to the rules of this module; (code, stdout, stderr)."""
    before = _dump(site.engine)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    logs = logging.root.handlers[:]
    try:
        code, out, err = run(*argv)
    finally:  # what the daemon command sets up for its process
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        logging.root.handlers[:] = logs
        while site.opened:
            site.opened.pop().dispose()
    shown = f"gctl {argv!r} -> {code}\nstdout: {out[:2000]!r}\nstderr: {err[:2000]!r}"
    assert code in (0, 1, 2), shown
    assert "Traceback" not in err, shown
    as_json = "--json" in argv and out
    if as_json:
        doc = _parsed(out)
    assert not unsafe(err + ("" if as_json else out)), shown
    lines = err.splitlines()
    if code != 0:
        assert lines and all(line.startswith("gctl: error: ") for line in lines), shown
        if tuple(argv[:1]) not in BULK:
            assert len(lines) == 1, shown
        refused = not out or (as_json and isinstance(doc, dict) and doc.get("results") == [])
        if refused and tuple(argv[:2]) not in REPORTS:
            assert _dump(site.engine) == before, f"store changed on refusal: {shown}"
    return code, out, err


def _parsed(out: str) -> Any:
    """One JSON document, or JSON lines (``events --follow --json``)."""
    try:
        return json.loads(out)
    except ValueError:
        return [json.loads(line) for line in out.splitlines()]


def _leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield path, command
        return
    for name, sub in sorted(subcommands.items()):
        yield from _leaves(sub, (*path, name))


COMMANDS = list(_leaves(typer.main.get_command(app)))
EXAMPLES = 8
"""Runs of each command on each backend: a few seconds a command in all."""


def _kind(param: Any) -> type:
    """The Python type of one value of a parameter (``list[int] | None`` is int)."""
    kind = param.type_descriptor.annotation
    while typing.get_origin(kind) is not None:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    return kind  # type: ignore[no-any-return]


def _values(site: Site, path: tuple[str, ...], param: Any) -> st.SearchStrategy[str]:
    """What to give one parameter of the command at ``path``."""
    if path == ("db", "copy"):  # ``--to``: a file name here, or nothing at all
        return st.sampled_from(POOLS["db"])
    name = POOL_NAMES.get(param.name, param.name)
    kind = _kind(param)
    text = st.one_of(st.sampled_from(TEXT_CASES), st.text(max_size=30))
    if name in ("job_id", "job_ids", "job"):
        return st.one_of(st.sampled_from(site.jobs), st.sampled_from(INT_CASES))
    if name in ("name", "names", "node") and (path[0] in ("node", "logs", "events", "show")):
        return st.one_of(st.sampled_from(site.nodes), text)
    if name == "port":
        return st.sampled_from([str(site.port), "0", "65536", "-1", "22x", str(2**40)])
    if name in POOLS:
        return st.one_of(st.sampled_from(POOLS[name]), st.sampled_from(site.files), text)
    if name in ("batch", "trace", "state_dir", "key", "work_dir", "dcgm_dir"):
        return st.one_of(st.sampled_from(site.files), text)
    if kind is int:
        return st.one_of(st.sampled_from(INT_CASES), st.integers(-(2**70), 2**70).map(str))
    if kind is float:
        return st.one_of(st.sampled_from(FLOAT_CASES), st.floats().map(repr))
    return text


@st.composite
def _argv(draw: st.DrawFn, site: Site, path: tuple[str, ...]) -> list[str]:
    """The command at ``path`` with some of its options and arguments, hostile values mostly."""
    command = dict(COMMANDS)[path]
    argv = list(path)
    args: list[str] = []
    for param in command.params:
        if param.param_type_name == "argument":
            count = draw(st.integers(0 if param.nargs == -1 else 1, 3 if param.nargs == -1 else 1))
            args += [draw(_values(site, path, param)) for _ in range(count)]
        elif draw(st.integers(0, 3)) == 0:
            if param.is_flag:
                argv.append(draw(st.sampled_from([*param.opts, *param.secondary_opts])))
            else:
                for _ in range(draw(st.integers(1, 2)) if param.multiple else 1):
                    argv += [draw(st.sampled_from(param.opts)), draw(_values(site, path, param))]
    return [*argv, *(["--"] if path == ("submit",) and draw(st.booleans()) else []), *args]


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_hostile_input(site: Site, path: tuple[str, ...], data: st.DataObject) -> None:
    check(site, data.draw(_argv(site, path)))


MUST_REFUSE = [
    ["submit", "--image", "i", "--gpus", "2147483648", "--", "a"],
    ["submit", "--image", "i", "--gpu-mem", "9" * 400, "--", "a"],
    ["submit", "--image", "i", "--elastic", "1:99999999999", "--", "a"],
    ["submit", "--image", "i", "--name", "n" * 256, "--", "a"],
    ["submit", "--image", "i", "--name", "\x9b2J", "--", "a"],
    ["submit", "--image", "i", "--name", "n\x00", "--", "a"],
    ["submit", "--image", "i", "--", "x" * 200_000],
    ["submit", "-f", "latin1.jsonl"],
    ["submit", "-f", "deep.json"],
    ["submit", "-f", "deep.jsonl"],
    ["submit", "-f", "deep.toml"],
    ["submit", "-f", "bigint.jsonl"],
    ["submit", "-f", "huge.toml"],
    ["submit", "-f", "envkey.jsonl"],
    ["submit", "-f", "nul.jsonl"],
    ["submit", "-f", "a\x00b"],
    ["queue", "-o", "%.999999999i"],
    ["queue", "-u", "\x00"],
    ["queue", "-w", "n" * 256],
    ["node", "add", "a\n", "--host", "127.0.0.1", "--host-key-fingerprint", FP],
    ["node", "add", "b", "--host", "127.0.0.1", "--host-key-fingerprint", FP + "\n"],
    ["node", "add", "c", "--host", "127.0.0.1", "--host-key-fingerprint", FP, "--user", "u" * 256],
    ["node", "add", "d", "--host", "127.0.0.1", "--host-key-fingerprint", FP, "--port", "99999"],
    ["node", "drain", "dead1", "--reason", "r\x00"],
    ["node", "drain", "dead1", "--reason", "r" * 5000],
    ["node", "show", "n" * 256],
    ["node", "show", "n\x00"],
    ["node", "rekey", "ghost", "--host-key-fingerprint", OTHER_FP],
    ["node", "rekey", "dead1", "--host-key-fingerprint", "SHA256:short"],
    ["node", "rekey", "dead1"],  # scans the host: nothing answers
    ["show", "job", "2147483648"],
    ["show", "job", "99999999999999999999"],
    ["cancel", "--signal", "BOGUS", "1"],
    ["cancel", "--signal", "0", "1"],
    ["cancel", "999999"],
    ["events", "--limit", "2147483648"],
    ["events", "--since", "1e400"],
    ["events", "--node", "n\x00"],
    ["logs", "2", "--tail", "2147483648"],
    ["logs", "2"],  # its node does not answer
    ["logs", "2", "--node", "n\x00"],
    ["migrate", "2", "--to", "dead1:²"],
    ["migrate", "2", "--to", "x\x00"],
    ["defrag", "--max-moves", "2147483648"],
    ["daemon", "--tick", "nan"],
    ["daemon", "--tick", "1e309"],
    ["daemon", "-o", "quantum=nan"],
    ["daemon", "--state-dir", "a\x00b"],
    ["watch", "--interval", "inf"],
    ["sim", "run", "tiny.csv", "--limit", "2147483648"],
    ["sim", "run", "tiny.csv", "--window", "0:1e400"],
    ["sim", "run", "a\x00b"],
    ["--db", "x\x00y", "queue"],
    ["--db", "n" * 5000, "queue"],
]
"""The issue's crafted cases and more: each is refused, with the rules of :func:`check` kept."""


def test_crafted_input_is_refused_in_one_line(site: Site) -> None:
    accepted = [argv for argv in MUST_REFUSE if check(site, argv)[0] == 0]
    assert accepted == []
