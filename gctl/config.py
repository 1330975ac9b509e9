"""Where gctl's settings and database live: config files, environment and defaults.

The database is chosen by, first to last: ``--db``, ``$GCTL_DB``, ``[store]
url`` in the user's config file, the same in the system config file, then a
SQLite file in a per-user data directory (``/var/lib/gctl/`` for root).
Config files are TOML; ``$GCTL_CONFIG`` names one to use instead of the
user's. An unknown section or key is an error, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

SYSTEM_CONFIG = Path("/etc/gctl/gctl.toml")

DEFAULT_WORK_DIR = "/var/lib/gctl"
"""Where job directories live on a host unless the node says otherwise."""

KNOWN: dict[str, set[str]] = {"store": {"url"}}
"""Sections and keys a config file may hold."""

STARTER = """\
# gctl configuration. Values here are overridden by $GCTL_DB and --db.

[store]
# SQLite file (the default) or a PostgreSQL server, for example
# url = "postgresql+psycopg://gctl@dbhost/gctl"
# Keep passwords out of this file: use ~/.pgpass or $PGPASSWORD.
url = "{url}"
"""


class ConfigError(Exception):
    """A config file that cannot be read or holds something unknown."""


@dataclass(frozen=True, slots=True)
class Settings:
    """The resolved settings and where the database choice came from."""

    db: str
    db_source: str


def _home() -> Path:
    return Path(os.environ.get("HOME") or Path.home())


def is_root() -> bool:
    """Whether gctl runs as root (system-wide paths then)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def starter_config_path() -> Path:
    """Where ``gctl init`` writes a starter config: ``$GCTL_CONFIG``, else system or user file."""
    if os.environ.get("GCTL_CONFIG") or not is_root():
        return user_config_path()
    return SYSTEM_CONFIG


def user_config_path() -> Path:
    """The config file of this user (or ``$GCTL_CONFIG``)."""
    explicit = os.environ.get("GCTL_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(_home() / ".config")
    return Path(base) / "gctl" / "gctl.toml"


def default_db_path() -> Path:
    """The SQLite file used when nothing else is configured."""
    if is_root():
        return Path("/var/lib/gctl/gctl.db")
    base = os.environ.get("XDG_DATA_HOME") or str(_home() / ".local" / "share")
    return Path(base) / "gctl" / "gctl.db"


def read_config(path: Path) -> dict[str, dict[str, object]]:
    """One config file's contents, checked against the known keys; {} if it does not exist."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    for section, values in data.items():
        if section not in KNOWN or not isinstance(values, dict):
            raise ConfigError(f"{path}: unknown section [{section}]")
        for key, value in values.items():
            if key not in KNOWN[section]:
                raise ConfigError(f"{path}: unknown key {key!r} in [{section}]")
            if not isinstance(value, str):
                raise ConfigError(f"{path}: [{section}] {key} must be a string")
    return data


def resolve(db: str | None = None) -> Settings:
    """Settings from ``--db`` (when given), the environment, config files and defaults."""
    if db:
        return Settings(db, "--db")
    env = os.environ.get("GCTL_DB")
    if env:
        return Settings(env, "$GCTL_DB")
    for path in (user_config_path(), SYSTEM_CONFIG):
        url = read_config(path).get("store", {}).get("url")
        if isinstance(url, str) and url:
            return Settings(url, str(path))
    return Settings(str(default_db_path()), "default")


def write_starter(path: Path, url: str) -> bool:
    """Write a starter config to ``path`` unless one exists; whether it was written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = STARTER.format(url=url.replace("\\", "\\\\").replace('"', '\\"'))
    try:
        with path.open("x", encoding="utf-8") as fh:  # "x": never over a file made meanwhile
            fh.write(text)
    except FileExistsError:
        return False
    return True
