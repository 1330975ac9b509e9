"""Run the real ``gctl`` entry point in-process, capturing its output and exit code."""

from __future__ import annotations

import contextlib
import io
import sys
import unicodedata

from gctl.cli.main import main


def run(*args: str) -> tuple[int, str, str]:
    """``gctl ARGS...`` as a user runs it: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["gctl", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def ok(*args: str) -> str:
    """``gctl ARGS...`` that must succeed: its standard output."""
    code, out, err = run(*args)
    assert code == 0, f"gctl {' '.join(args)}: {err}"
    return out


def unsafe(text: str) -> list[str]:
    """The characters of printed ``text`` that could act on a terminal (line breaks apart)."""
    return [
        c for c in text if c != "\n" and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}
    ]
