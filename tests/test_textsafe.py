"""Text made inert for terminals: every control and bidi character shown escaped, nothing else."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gctl.textsafe import inert, inert_keeping_colours

UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]0;pwned\x07 y", "\\x1b]0;pwned\\x07 y"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x9b2Jb", "a\\x9b2Jb"),
        ("\x7f", "\\x7f"),
        ("tab\tline\ncr\r", "tab\\tline\\ncr\\r"),
        ("abc\u202edef", "abc\\u202edef"),
        ("\u2066x\u2069 \u200e\u200f\u061c", "\\u2066x\\u2069 \\u200e\\u200f\\u061c"),
        ("zero\u200bwidth\u200d\u200c\ufeff", "zero\\u200bwidth\\u200d\\u200c\\ufeff"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lone \udcff", "lone \\udcff"),
    ],
)
def test_controls_bidi_and_invisible_characters_are_escaped(text: str, shown: str) -> None:
    assert inert(text) == shown


@pytest.mark.parametrize(
    "text", ["plain", "é ü ß", "日本語", "😀", "a\u00a0b", "[red]x[/]", "\\x1b"]
)
def test_printable_text_is_kept_as_it_is(text: str) -> None:
    assert inert(text) == text


@given(st.text())
def test_nothing_unsafe_is_left_and_safe_text_is_untouched(text: str) -> None:
    out = inert(text)
    assert not any(unicodedata.category(c) in UNSAFE for c in out)
    assert out == "".join(map(inert, text))  # character by character, in order
    assert (out == text) == (not any(unicodedata.category(c) in UNSAFE for c in text))


def test_colours_are_kept_and_every_other_escape_is_shown() -> None:
    text = "\x1b[1;31mred\x1b[0m \x1b]0;title\x07 \x1b[2J\x9b"
    assert inert_keeping_colours(text) == "\x1b[1;31mred\x1b[0m \\x1b]0;title\\x07 \\x1b[2J\\x9b"
