"""Hostile text is stored byte for byte and printed inert: escaped in listings, exact in JSON."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import pytest
from clikit import ok, run, unsafe

FP = ("--host-key-fingerprint", "SHA256:" + "A" * 43)
TITLE = "\x1b]0;pwned\x07"
"""A terminal title change: the job's program, hence its default name."""
CLEAR = "\x1b[2J"
BIDI = "evil\u202eexe.txt\u2066x\u2069"
C1 = "\x9b2J"
MARKUP = "[/bold] [red]x[/red] [link=http://e]y"


@pytest.fixture
def hostile(gdb: Path, tmp_path: Path) -> dict[str, int]:
    """A store whose jobs, node and events carry control, bidi and markup text."""
    ok("node", "add", "n1", "--host", "127.0.0.1", *FP, "--emulate-gpus", "2xV100-16GB")
    ok("node", "drain", "n1", "--reason", f"{CLEAR}fan {BIDI} {C1}")
    batch = tmp_path / "jobs.jsonl"
    spec = {"image": "i", "gpus": 1, "env": {"TOKEN": f"{CLEAR}\x7f{C1}"}}
    batch.write_text(
        json.dumps({**spec, "command": [TITLE, "y"]})
        + "\n"
        + json.dumps({**spec, "command": ["x", f"{CLEAR}\x7f"], "name": BIDI})
        + "\n"
        + json.dumps({**spec, "command": ["x"], "name": MARKUP})
        + "\n"
    )
    ids = [int(i) for i in ok("submit", "--parsable", "-f", str(batch)).split()]
    ok("hold", str(ids[1]))
    return {"title": ids[0], "bidi": ids[1], "markup": ids[2]}


def _clean(*args: str) -> str:
    code, out, err = run(*args)
    assert not unsafe(out + err), (args, out, err)
    assert code == 0, err
    return out


def test_listings_show_control_and_bidi_characters_escaped(hostile: dict[str, int]) -> None:
    queue = _clean("queue", "-o", "%i|%j|%u|%R")
    assert f"{hostile['title']}|\\x1b]0;pwned\\x07|alice|" in queue
    assert "evil\\u202eexe.txt\\u2066x\\u2069" in queue
    assert "\\x1b[2Jfan evil\\u202eexe.txt\\u2066x\\u2069 \\x9b2J" in _clean("node", "ls", "-R")
    shown = _clean("show", "job", str(hostile["bidi"]))
    assert "JobName=evil\\u202eexe.txt" in shown
    assert 'Command=["x", "\\u001b[2J\\u007f"]' in shown  # as JSON writes them
    assert "Reason=\\x1b[2Jfan" in _clean("show", "node", "n1")
    assert "\\x1b[2Jfan" in _clean("events")
    assert "held by alice" in _clean("why", str(hostile["bidi"]))
    # What was stored is kept exactly, and JSON gives it back so.
    job = json.loads(_clean_json("show", "job", str(hostile["title"]), "--json"))
    assert job["name"] == TITLE and job["spec"]["command"] == [TITLE, "y"]
    assert job["spec"]["env"] == {"TOKEN": f"{CLEAR}\x7f{C1}"}
    (node,) = json.loads(_clean_json("node", "ls", "-R", "--json"))
    assert node["reason"] == f"{CLEAR}fan {BIDI} {C1}"
    names = [j["name"] for j in json.loads(_clean_json("queue", "--json"))["jobs"]]
    assert names == [TITLE, BIDI, MARKUP]


def test_errors_and_the_format_itself_are_escaped(hostile: dict[str, int]) -> None:
    code, out, err = run("node", "show", f"{CLEAR}{BIDI}")
    assert (code, out) == (1, "")
    assert err == "gctl: error: unknown node '\\x1b[2Jevil\\u202eexe.txt\\u2066x\\u2069'\n"
    assert _clean("queue", "-h", "-o", f"{CLEAR}%i").startswith("\\x1b[2J")


def _clean_json(*args: str) -> str:
    code, out, err = run(*args)
    assert code == 0 and err == "", err
    return out


def test_the_daemon_s_log_lines_are_inert(gdb: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run_and_log(*args: object, **kwargs: object) -> None:
        logging.getLogger("gctl.daemon").warning("job %s (%s) failed", 1, TITLE)

    monkeypatch.setattr("gctl.daemon.loop.Daemon.run", run_and_log)
    handlers = logging.root.handlers[:]
    stops = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code, _, err = run("daemon")
    finally:
        logging.root.handlers[:] = handlers
        for sig, handler in stops.items():
            signal.signal(sig, handler)
    assert code == 0 and not unsafe(err)
    assert err.endswith(" gctl.daemon WARNING job 1 (\\x1b]0;pwned\\x07) failed\n")
