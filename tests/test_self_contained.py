"""The project is whole in its repository: nothing it ships or runs reads a folder beside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Built from pieces so that this file does not match itself.
OUTSIDE = re.compile(r"\.\./" + "shared" + r"|parent / " + '"shared"')


def tracked_files() -> list[Path]:
    out = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout
    return [REPO / name for name in out.decode().split("\0") if name]


def test_no_file_of_the_project_reads_a_folder_beside_the_checkout() -> None:
    files = tracked_files()
    assert len(files) > 100  # the listing worked
    hits = []
    for path in files:
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # compressed data
        hits += [
            f"{path.relative_to(REPO)}:{n}"
            for n, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line)
        ]
    assert hits == []
