"""Shell completion scripts and man pages, generated from the CLI itself.

Run in the checkout after changing a command, an option or a help text, and
commit what changes (a test fails until then)::

    python -m gctl.cli.docs        # rewrite completions/ and man/ here
    python -m gctl.cli.docs DIR    # write them under DIR instead

The completion scripts are Typer's own, the ones ``gctl --show-completion``
prints; the zsh one also completes on the first Tab when autoloaded from
``site-functions``. The man pages follow git's layout: ``gctl(1)`` with the
global options and the list of commands, then one ``gctl-COMMAND(1)`` per
command or command group, with every option's help and default as ``--help``
shows them. Nothing in them depends on when or where they are generated: no
dates, the package version as their source.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import typer
from typer._click import Command, Context
from typer._completion_shared import get_completion_script
from typer.core import TyperGroup

import gctl.config
from gctl import __version__
from gctl.cli.main import app

PROG = "gctl"
COMPLETE_VAR = "_GCTL_COMPLETE"
"""The variable Typer reads to answer a completion request (``_{PROG}_COMPLETE``)."""

COMPLETIONS = {
    "bash": "completions/bash/gctl",
    "zsh": "completions/zsh/_gctl",
    "fish": "completions/fish/gctl.fish",
}
"""Each shell's script, named as its completion directory wants it."""

MAN_DIR = "man"

ZSH_AUTOLOAD = """

# Autoloaded from fpath (site-functions/_gctl) rather than sourced: complete
# now as well, or the first Tab would only register the function above.
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _gctl_completion "$@"
fi
"""

EXIT_STATUS = [
    ("0", "Success."),
    (
        "1",
        "An error gctl reports in one line on stderr, or, for gctl node probe and"
        " gctl node top, a node that did not answer.",
    ),
    (
        "2",
        "A command line found wrong before anything is done: an unknown command or option,"
        " a missing argument, a value of the wrong form, out of range or not among the"
        " choices, an unknown policy.",
    ),
]

ENVIRONMENT = [
    ("GCTL_DB", "The database (a SQLite file or a URL) when --db is not given."),
    ("GCTL_CONFIG", "The config file to read instead of the user's."),
    (
        "GCTL_USER",
        "Operators only: act for this user (recorded as them; their jobs run as them).",
    ),
]

FILES = [
    ("~/.config/gctl/gctl.toml", "The user's config file ($XDG_CONFIG_HOME/gctl/gctl.toml)."),
    (str(gctl.config.SYSTEM_CONFIG), "The system config file."),
    (
        "~/.local/share/gctl/gctl.db",
        "The default database ($XDG_DATA_HOME/gctl/gctl.db); /var/lib/gctl/gctl.db for root.",
    ),
]


def generate() -> dict[str, str]:
    """Every generated file: its path relative to the checkout and its text."""
    return {**completion_scripts(), **man_pages()}


def completion_scripts() -> dict[str, str]:
    """The bash, zsh and fish completion scripts, by path."""
    files = {}
    for shell, path in COMPLETIONS.items():
        script = get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell)
        files[path] = script + (ZSH_AUTOLOAD if shell == "zsh" else "\n")
    return files


def man_pages() -> dict[str, str]:
    """``gctl.1`` and one page per command or command group, by path."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    ctx = _context(root, PROG, None)
    pages = {f"{MAN_DIR}/{PROG}.1": _root_page(root, ctx)}
    for name in root.list_commands(ctx):
        command = root.commands[name]
        pages[f"{MAN_DIR}/{PROG}-{name}.1"] = _command_page(command, _context(command, name, ctx))
    return pages


def write(root: Path) -> list[str]:
    """Write every generated file under ROOT and remove man pages no command has any more.

    Returns the paths (relative to ROOT) that were written, changed or removed.
    """
    files = generate()
    touched = []
    for rel, text in files.items():
        path = root / rel
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            touched.append(rel)
    for page in sorted((root / MAN_DIR).glob(f"{PROG}*.1")):
        rel = f"{MAN_DIR}/{page.name}"
        if rel not in files:
            page.unlink()
            touched.append(rel)
    return touched


# ---------------------------------------------------------------- man pages


def _context(command: Command, name: str, parent: Context | None) -> Context:
    """A context for reading a command's help: no arguments, nothing checked or run."""
    return command.make_context(name, [], parent=parent, resilient_parsing=True)


def _root_page(root: TyperGroup, ctx: Context) -> str:
    """``gctl(1)``: global options, every command with its page, configuration, exit status."""
    out = _header(PROG, _summary(root))
    out += [".SH SYNOPSIS", *_synopsis([_usage(root, ctx)]), ".SH DESCRIPTION"]
    out += [
        *_paragraphs(root.help),
        ".PP",
        _esc(
            f"Options given before the command apply to every command, as in"
            f" {PROG} --db FILE node ls. Every command takes --help."
        ),
        ".SH OPTIONS",
        *_params(root, ctx, "option"),
        ".SH COMMANDS",
    ]
    for name in root.list_commands(ctx):
        out += [".TP", f"\\fB{_esc(f'{PROG}-{name}')}\\fR(1)", _esc(_summary(root.commands[name]))]
    out += [".SH DATABASE AND CONFIGURATION", *_paragraphs(_body(gctl.config.__doc__))]
    out += _section("ENVIRONMENT", ENVIRONMENT)
    out += _section("FILES", FILES)
    out += _section("EXIT STATUS", EXIT_STATUS)
    return _lines(out)


def _command_page(command: Command, ctx: Context) -> str:
    """A command's page, or a group's with a subsection per subcommand."""
    out = _header(f"{PROG}-{ctx.info_name}", _summary(command))
    if not isinstance(command, TyperGroup):
        out += [".SH SYNOPSIS", *_synopsis([_usage(command, ctx)]), ".SH DESCRIPTION"]
        out += _paragraphs(command.help)
        for kind, title in (("argument", "ARGUMENTS"), ("option", "OPTIONS")):
            items = _params(command, ctx, kind)
            out += [f".SH {title}", *items] if items else []
    else:
        subs = [
            (command.commands[n], _context(command.commands[n], n, ctx))
            for n in command.list_commands(ctx)
        ]
        out += [".SH SYNOPSIS", *_synopsis([_usage(s, c) for s, c in subs]), ".SH DESCRIPTION"]
        out += [*_paragraphs(command.help), ".SH COMMANDS"]
        for sub, sub_ctx in subs:
            out += [f'.SS "{_esc(sub_ctx.command_path)}"', _usage(sub, sub_ctx), ".PP"]
            out += _paragraphs(sub.help)
            for kind, title in (("argument", "Arguments:"), ("option", "Options:")):
                items = _params(sub, sub_ctx, kind)
                out += [".PP", title, *items] if items else []
    out += [".SH SEE ALSO", f"\\fB{PROG}\\fR(1)"]
    return _lines(out)


def _header(name: str, summary: str) -> list[str]:
    """Title line, then NAME on one line (what whatis and apropos show).

    Lines are left-aligned and never hyphenated, so no option or value is
    split across lines.
    """
    return [
        f'.TH {_esc(name.upper())} 1 "" "{PROG} {__version__}" "{PROG} manual"',
        ".nh",
        ".ad l",
        ".SH NAME",
        f"{_esc(name)} \\- {_esc(summary.rstrip('.'))}",
    ]


def _synopsis(usages: list[str]) -> list[str]:
    """Usage lines, one per line, unfilled."""
    return [".nf", *usages, ".fi"]


def _usage(command: Command, ctx: Context) -> str:
    """``gctl node add [OPTIONS] NODE``: the command bold, the rest italic, as --help has it."""
    pieces = " ".join(f"\\fI{_esc(p)}\\fR" for p in command.collect_usage_pieces(ctx))
    return f"\\fB{_esc(ctx.command_path)}\\fR {pieces}"


def _params(command: Command, ctx: Context, kind: str) -> list[str]:
    """``.TP`` items for the arguments or the options: names, metavar, help with default.

    ``--help``, which every command takes, is listed once, on ``gctl(1)``.
    """
    out = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if param.param_type_name != kind or record is None:
            continue
        if param.name == "help" and ctx.parent is not None:
            continue
        names, help_text = record
        out += [".TP", _term(names, kind), _esc(" ".join(help_text.split()))]
    return out


def _term(names: str, kind: str) -> str:
    """``-f, --file FILE`` or ``JOB_ID``: option names bold, metavars italic."""
    out = []
    for part in re.split(r"(, | / | )", names):
        if part in (", ", " / ", " "):
            out.append(part)
        elif part.startswith("-") and kind == "option":
            out.append(f"\\fB{_esc(part)}\\fR")
        else:
            out.append(f"\\fI{_esc(part)}\\fR")
    return "".join(out)


def _section(title: str, items: list[tuple[str, str]]) -> list[str]:
    """A section of ``.TP`` items: a bold term, then its text."""
    out = [f".SH {title}"]
    for term, text in items:
        out += [".TP", f"\\fB{_esc(term)}\\fR", _esc(text)]
    return out


def _summary(command: Command) -> str:
    """The first paragraph of a command's help, on one line."""
    return " ".join((command.help or "").split("\n\n")[0].split())


def _body(doc: str | None) -> str:
    """A docstring without its summary line."""
    return (doc or "").split("\n\n", 1)[-1]


def _paragraphs(text: str | None) -> list[str]:
    """Help text as roff paragraphs, each on one line; ``literal`` in bold."""
    out = []
    for para in (text or "").split("\n\n"):
        if para.strip():
            line = _esc(" ".join(para.split()))
            out += [".PP", re.sub(r"``(.+?)``", r"\\fB\1\\fR", line)]
    return out[1:]


def _esc(text: str) -> str:
    r"""Text as roff input: ``\`` and ``-`` escaped, non-ASCII as ``\[uXXXX]``.

    Every hyphen is ``\-``, so options, paths and specs such as 4xV100-16GB
    render as ASCII hyphen-minus and can be copied from the page. A line that
    starts with ``.`` or ``'`` is guarded with ``\&``.
    """
    out = text.replace("\\", "\\e").replace("-", "\\-")
    out = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in out)
    return "\\&" + out if out.startswith((".", "'")) else out


def _lines(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """``python -m gctl.cli.docs [DIR]``: regenerate the files under DIR (default: here)."""
    parser = argparse.ArgumentParser(
        prog="python -m gctl.cli.docs",
        description="Regenerate completions/ and man/ from the CLI.",
    )
    parser.add_argument("dir", nargs="?", type=Path, default=Path("."), help="checkout root")
    args = parser.parse_args(argv)
    touched = write(args.dir)
    for rel in touched:
        print(f"updated {rel}")
    if not touched:
        print("completions and man pages are up to date")


if __name__ == "__main__":
    main()
