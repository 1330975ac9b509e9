"""man/: current, warning-free for groff and man, and carrying every command and option."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer._click import Command
from typer.core import TyperGroup

from gctl.cli import docs
from gctl.cli.main import app

REPO = Path(__file__).resolve().parents[1]
MAN = REPO / docs.MAN_DIR
PAGES = sorted(p.name for p in MAN.glob("*.1"))
REGENERATE = f"{sys.executable} -m gctl.cli.docs"


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed (scripts/test.sh installs it: apt-get install {package})"
        )
    return path


def _text(page: str) -> str:
    """PAGE as plain text on one line: no fonts, no hyphenation, whitespace collapsed."""
    out = subprocess.run(
        [_tool("groff", "groff-base"), "-man", "-Tascii", "-P-cbou", "-rLL=200n", str(MAN / page)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return " ".join(out.stdout.split())


def test_committed_pages_are_current(tmp_path: Path) -> None:
    (tmp_path / docs.MAN_DIR).mkdir()
    (tmp_path / docs.MAN_DIR / "gctl-gone.1").write_text(".TH GONE 1\n")  # a removed command's
    touched = docs.write(tmp_path)
    assert f"{docs.MAN_DIR}/gctl-gone.1" in touched
    fresh = sorted(p.name for p in (tmp_path / docs.MAN_DIR).glob("*.1"))
    assert fresh == PAGES, f"man/ holds other pages than the CLI makes; run: {REGENERATE}"
    for page in PAGES:
        new, old = (tmp_path / docs.MAN_DIR / page).read_text(), (MAN / page).read_text()
        diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True)))
        assert new == old, f"man/{page} is out of date; run: {REGENERATE}\n{diff}"
    assert docs.write(tmp_path) == []


def test_regenerating_from_the_command_line_is_repeatable(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "gctl.cli.docs", str(tmp_path)]
    first = subprocess.run(run, capture_output=True, text=True, timeout=120, check=True)
    assert f"updated {docs.MAN_DIR}/gctl.1" in first.stdout.splitlines()
    again = subprocess.run(run, capture_output=True, text=True, timeout=120, check=True)
    assert again.stdout == "completions and man pages are up to date\n"


@pytest.mark.parametrize("page", PAGES)
def test_groff_renders_the_page_without_a_warning(page: str) -> None:
    out = subprocess.run(
        [_tool("groff", "groff-base"), "-man", "-Tutf8", "-ww", "-z", str(MAN / page)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stderr) == (0, "")


def test_man_shows_the_main_page_cleanly() -> None:
    out = subprocess.run(
        [_tool("man", "man-db"), "--warnings", "-l", str(MAN / "gctl.1")],
        env={**os.environ, "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (out.returncode, out.stderr) == (0, "")
    assert "gctl-submit(1)" in out.stdout and "--db" in out.stdout


def test_whatis_reads_each_page_name() -> None:
    """lexgrog parses NAME the way mandb does for whatis and apropos."""
    out = subprocess.run(
        [_tool("lexgrog", "man-db"), *PAGES],
        cwd=MAN,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    names = [line.split(": ", 1)[1].strip('"').split(" - ")[0] for line in out.stdout.splitlines()]
    assert names == [page.removesuffix(".1") for page in PAGES]


def _commands() -> list[tuple[str, list[str], Command]]:
    """Each command: the page it is on, its path of names, the command."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    found = []
    for name, command in root.commands.items():
        if isinstance(command, TyperGroup):
            found += [(f"gctl-{name}.1", [name, sub], c) for sub, c in command.commands.items()]
        else:
            found.append((f"gctl-{name}.1", [name], command))
    return found


def test_the_main_page_names_every_command_and_global_option() -> None:
    text = _text("gctl.1")
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    for name in root.commands:
        assert f"gctl-{name}(1)" in text
    for param in root.params:
        assert all(opt in text for opt in param.opts)


COMMANDS = _commands()


def _usage(path: list[str]) -> str:
    return f"gctl {' '.join(path)} [OPTIONS]"


def _part(text: str, path: list[str]) -> str:
    """The part of a page about the command at PATH: from its usage line (the last one
    shown, after the synopsis) to the next command's or to SEE ALSO."""
    start = text.rindex(_usage(path))
    others = [text.rindex(_usage(p)) for _, p, _ in COMMANDS if p[0] == path[0] and p != path]
    return text[start : min([i for i in others if i > start] + [text.index("SEE ALSO")])]


@pytest.mark.parametrize(
    ("page", "path", "command"), COMMANDS, ids=[" ".join(path) for _, path, _ in COMMANDS]
)
def test_each_option_is_on_its_page_with_help_and_default(
    page: str, path: list[str], command: Command
) -> None:
    text = _part(_text(page), path)
    assert " ".join((command.help or "").split()) in text
    for param in command.params:
        if param.name == "help":
            continue
        names = [*param.opts, *getattr(param, "secondary_opts", [])]
        if param.param_type_name == "argument":
            names = []  # shown by its metavar, as in --help
        for shown in [*names, *([param.metavar] if param.metavar else [])]:
            assert shown in text, f"{shown} of gctl {' '.join(path)} missing from {page}"
        help_text = " ".join((getattr(param, "help", None) or "").split())
        assert help_text in text, f"help of {param.name} missing from {page}"
        default = param.default
        if param.param_type_name == "option" and default not in (None, "", False, True):
            assert f"[default: {default}" in text, f"default of {param.name} missing from {page}"
