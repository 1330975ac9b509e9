"""``pip install .``: the wheel carries the Alembic migrations, so an installed gctl can upgrade
its database, and the man pages and shell completions, installed where man and the shells look."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gctl import __version__

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    (built,) = out.glob("gctl-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_names(wheel: Path) -> set[str]:
    """The paths in that wheel."""
    return set(zipfile.ZipFile(wheel).namelist())


def test_wheel_contains_every_migration_and_every_package(wheel_names: set[str]) -> None:
    """The top-level migrations/ ships as gctl.migrations; no package of gctl is left out."""
    versions = REPO / "migrations" / "versions"
    expected = {f"gctl/migrations/versions/{p.name}" for p in versions.glob("*.py")}
    assert expected and expected <= wheel_names
    assert {"gctl/migrations/env.py", "gctl/migrations/script.py.mako"} <= wheel_names
    packages = {
        f"{p.parent.relative_to(REPO).as_posix()}/__init__.py"
        for p in (REPO / "gctl").rglob("__init__.py")
    }
    assert packages <= wheel_names


def test_wheel_installs_man_pages_and_completions(wheel_names: set[str]) -> None:
    """pip installs ``<name>.data/data/X`` as ``<prefix>/X``: where man and the shells look."""
    data = f"gctl-{__version__}.data/data/share"
    pages = {f"{data}/man/man1/{p.name}" for p in (REPO / "man").glob("*.1")}
    assert f"{data}/man/man1/gctl.1" in pages and pages <= wheel_names
    assert {
        f"{data}/bash-completion/completions/gctl",
        f"{data}/zsh/site-functions/_gctl",
        f"{data}/fish/vendor_completions.d/gctl.fish",
    } <= wheel_names


def test_an_installed_gctl_creates_its_database_and_has_its_man_pages(
    wheel: Path, tmp_path: Path
) -> None:
    """Installed from the wheel into a fresh prefix, away from this checkout: the real command."""
    prefix = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    # The dependencies (and pip) come from this environment, no network needed; this
    # checkout's editable gctl does not, since a path listed in a .pth file is not
    # itself searched for .pth files. gctl comes from the wheel.
    site = next((prefix / "lib").glob("python3*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    python = str(prefix / "bin" / "python")
    subprocess.run(
        # --ignore-installed: pip must not uninstall this checkout's gctl, which it sees.
        [python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "-q", "--no-compile",
         str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    gctl = prefix / "bin" / "gctl"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GCTL_CONFIG": str(tmp_path / "c")}
    db = tmp_path / "gctl.db"
    init = subprocess.run(
        [str(gctl), "--db", str(db), "init"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert init.returncode == 0, init.stderr
    assert "created (schema" in init.stdout
    found = subprocess.run(
        [str(gctl), "--db", str(db), "queue"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert found.returncode == 0 and found.stdout.startswith("   JOBID"), found.stderr
    module = subprocess.run(
        [python, "-c", "import gctl; print(gctl.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert module.startswith(str(prefix)), module  # the installed copy, not this checkout
    assert (prefix / "share" / "man" / "man1" / "gctl.1").is_file()
    assert (prefix / "share" / "bash-completion" / "completions" / "gctl").is_file()
