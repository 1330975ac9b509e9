r"""Text from users and hosts made inert for a terminal: its control and bidi characters escaped.

Job names, commands, reasons, event messages, host names, GPU models a host
reports: gctl stores them byte for byte and prints them through
:func:`inert`, which shows every character that could act on a terminal or
disguise what is shown (``\x1b``, ``\x9b``, ``\u202e``) the way Python
writes it in a string literal. The CLI's renderer and the dashboard both
use it; JSON output keeps the text exact (JSON escapes what it must).

Escaped are the Unicode categories that draw nothing of their own: controls
(Cc: C0, DEL, C1 with the 8-bit CSI U+009B), format characters (Cf: the
bidi embeddings, overrides and isolates U+202A..U+202E and U+2066..U+2069,
the marks U+200E, U+200F and U+061C, zero-width spaces and joiners, the
byte order mark, tag characters), lone surrogates (Cs), and the line and
paragraph separators (Zl, Zp). Zero-width joiners go too: an emoji sequence
then shows as its parts, but two names that look alike cannot differ by an
invisible character.
"""

from __future__ import annotations

import functools
import re
import unicodedata

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_SGR = re.compile(r"(\x1b\[[0-9;:]*m)")
"""A Select Graphic Rendition sequence (colours, bold): what :func:`inert_keeping_colours` keeps."""


def inert(text: str) -> str:
    """``text`` with every control, format and bidi character written as a visible escape.

    Anything else, non-ASCII letters and emoji included, is kept. Text with
    nothing to escape is returned as it is, at the cost of one C-level scan.
    """
    if text.isprintable():  # False for every character escaped here (and for non-ASCII spaces)
        return text
    return "".join(map(_char, text))


@functools.lru_cache(maxsize=4096)
def _char(c: str) -> str:
    """One character as :func:`inert` shows it."""
    if unicodedata.category(c) not in _UNSAFE_CATEGORIES:
        return c
    if c in _SHORT:
        return _SHORT[c]
    code = ord(c)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def inert_keeping_colours(text: str) -> str:
    """Like :func:`inert`, but colour and style sequences (SGR) stay for a renderer to parse.

    For a job's own output shown inside the dashboard, where the colours it
    wrote are kept (``rich.text.Text.from_ansi``) and any other escape
    sequence, cursor moves and title changes included, is shown escaped.
    """
    return "".join(part if i % 2 else inert(part) for i, part in enumerate(_SGR.split(text)))
