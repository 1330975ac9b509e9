"""Real operating-system users for the multi-user tests, and gctl run as them.

Two plain users and an operator (a member of the default admin group,
``gctl-admin``), made with ``useradd`` (root only) and removed at the end.
gctl runs as them with ``runuser`` under Debian's own ``python3.11`` and the
checkout's virtual environment on its path: the environment's interpreter
lives under root's home, which other users cannot enter.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import gctl

ALICE, BOB, CAROL = "gctlalice", "gctlbob", "gctlcarol"
"""Two users and an operator."""
ADMIN_GROUP = "gctl-admin"
SYSTEM_PYTHON = "/usr/bin/python3.11"
SITE = str(
    Path(sys.prefix)
    / "lib"
    / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    / "site-packages"
)
REPO = str(Path(gctl.__file__).resolve().parents[1])


@dataclass(frozen=True, slots=True)
class Ran:
    """What a command run as another user did."""

    code: int
    out: str
    err: str


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@contextmanager
def os_users() -> Iterator[dict[str, int]]:
    """The three users (their uids), made now and removed after; the admin group too."""
    made_group = subprocess.run(["getent", "group", ADMIN_GROUP], capture_output=True).returncode
    if made_group:
        _run(["groupadd", ADMIN_GROUP])
    made = []
    for name in (ALICE, BOB, CAROL):
        try:
            pwd.getpwnam(name)
        except KeyError:
            extra = ["-G", ADMIN_GROUP] if name == CAROL else []
            _run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", *extra, name])
            made.append(name)
    try:
        yield {name: pwd.getpwnam(name).pw_uid for name in (ALICE, BOB, CAROL)}
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True)
        if made_group:
            subprocess.run(["groupdel", ADMIN_GROUP], capture_output=True)


def as_user(user: str, *args: str, env: dict[str, str] | None = None) -> Ran:
    """``gctl ARGS...`` run by ``user``, in a clean environment (plus ``env``)."""
    code = (
        "import site, sys; site.addsitedir(sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
        " sys.argv = ['gctl', *sys.argv[3:]]; from gctl.cli.main import main; main()"
    )
    clean = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8", **(env or {})}
    out = subprocess.run(
        ["/usr/sbin/runuser", "-u", user, "--", SYSTEM_PYTHON, "-c", code, SITE, REPO, *args],
        capture_output=True,
        text=True,
        env=clean,
        cwd="/",
        timeout=120,
    )
    return Ran(out.returncode, out.stdout, out.stderr)


def open_to_all(path: Path) -> None:
    """Let other users reach ``path`` (a test's directory) and the directories above it."""
    for p in [path, *path.parents]:
        if p == Path("/"):
            break
        os.chmod(p, os.stat(p).st_mode | 0o011)
