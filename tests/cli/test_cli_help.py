"""Every command's --help through a pipe at 80 columns: plain text, whole names, man-like.

Each command of the tree Typer builds is asked for ``--help`` by the real
console script with its output piped (not a terminal) and ``COLUMNS=80``:
plain text (no boxes, no colours), no line wider than 80 columns, every
option name whole (never cut to ``--virtual-clust…``), every value shown by
its man-page metavar (``--gpus N``, ``--env KEY=VALUE``), never by a Python
type (``<int>``, ``<list[str]>``, ``<int range>``) or bound (``x>=1``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer._click import Command, Parameter
from typer.core import TyperGroup

from gctl.cli.main import app

GCTL = Path(sys.executable).with_name("gctl")

PYTHON_TYPES = re.compile(
    r"<(?:bool|int|float|str|path|file|list|tuple|dict|text|datetime|uuid|choice)\b"
    r"|list\[|\brange\b|\bx\s*[<>]=|[<>]=\s*x\b|\{\w+\}"
)
"""What Typer shows of a value's Python type: ``<int>``, ``<list[str]>``, ``<int range>``,
``[1<=x<=9]``, ``{trace}``."""


def _tree(command: Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Command]]:
    subs = command.commands.items() if isinstance(command, TyperGroup) else ()
    return [(path, command), *(c for name, sub in subs for c in _tree(sub, (*path, name)))]


COMMANDS = _tree(typer.main.get_command(app))


def _help(path: tuple[str, ...]) -> str:
    """``gctl PATH --help`` through a pipe at 80 columns: its standard output."""
    out = subprocess.run(
        [str(GCTL), *path, "--help"],
        env={**os.environ, "COLUMNS": "80", "TERM": "xterm-256color"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    return out.stdout


def _whole(name: str, text: str) -> bool:
    """Whether option NAME is in TEXT as a whole word (not ``--virtual-clust`` of a longer one)."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(("gctl", *p)) for p, _ in COMMANDS]
)
def test_help_through_a_pipe_at_80_columns_is_plain_whole_and_man_like(
    path: tuple[str, ...], command: Command
) -> None:
    text = _help(path)
    assert text.startswith(f"Usage: {' '.join(('gctl', *path))} ")
    assert "…" not in text and "\x1b" not in text, text  # nothing cut, no colours
    assert not re.search(r"[\u2500-\u257f]", text), text  # no box drawing
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert not PYTHON_TYPES.search(text), PYTHON_TYPES.findall(text)
    for param in command.params:
        _check_shown(param, text)


def _check_shown(param: Parameter, text: str) -> None:
    """PARAM's names are whole in TEXT, each value with its metavar, a flag with none."""
    if param.param_type_name == "argument":
        assert param.metavar and re.fullmatch(r"[A-Z_]+", param.metavar), param.name
        assert re.search(rf"^  {param.metavar}  ", text, re.M), f"{param.metavar} not listed"
        return
    names = [*param.opts, *getattr(param, "secondary_opts", [])]
    for name in names:
        assert _whole(name, text), f"{name} not whole in:\n{text}"
    if getattr(param, "is_flag", False):
        assert param.metavar is None, param.name
        return
    last = sorted(param.opts, key=lambda o: len(o) - len(o.lstrip("-")))[-1]  # as click joins
    assert param.metavar, f"{last} has no metavar"
    assert f"{last} {param.metavar}" in text, f"{last} {param.metavar} not in:\n{text}"


def test_metavars_read_like_a_man_page() -> None:
    shown = {
        ("submit",): ["--gpus N", "--env KEY=VALUE", "--gpu-mem SIZE", "--mount SRC:DST[:ro]"],
        ("sim", "run"): ["--limit N ", "Only the first N jobs.  [at least 1]", "--tick SECONDS"],
        ("cancel",): ["Usage: gctl cancel [OPTIONS] [JOB_ID]...", "-t, --state STATES"],
        ("node", "show"): ["Usage: gctl node show [OPTIONS] [NODE]"],
        ("node", "rm"): ["Usage: gctl node rm [OPTIONS] NODE"],
        ("show", "job"): ["JOB_ID  Job id.  [at least 1; required]"],
        (): ["--db FILE|URL"],
    }
    for path, expected in shown.items():
        text = _help(path)
        for piece in expected:
            assert piece in text, f"{piece!r} not in:\n{text}"
