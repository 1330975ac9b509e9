"""Where gctl's settings and database live: config files, environment and defaults.

The database is chosen by, first to last: ``--db``, ``$GCTL_DB``, ``[store]
url`` in the user's config file, the same in the system config file, then a
SQLite file in a per-user data directory (``/var/lib/gctl/`` for root).
Config files are TOML; ``$GCTL_CONFIG`` names one to use instead of the
user's. An unknown section or key, or a value of the wrong type, is an
error, so a typo never silently falls back to a default.

The site's policy (``[security]``, ``[limits]``, ``[users.NAME]``: who is
an operator, what a job container may do, what each user may ask for) is
read from the system config file only, or from ``$GCTL_CONFIG`` when root
runs gctl: a user cannot grant themselves anything with a file of their own.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gctl.slurmtime import TimeFormatError, parse_time_limit

SYSTEM_CONFIG = Path("/etc/gctl/gctl.toml")

DEFAULT_WORK_DIR = "/var/lib/gctl"
"""Where job directories live on a host unless the node says otherwise."""


def node_cache_dir(work_dir: str | None, cache_dir: str | None) -> str:
    """Where a node caches datasets: its ``cache_dir``, else its work directory's ``datasets``."""
    return cache_dir or f"{work_dir or DEFAULT_WORK_DIR}/datasets"


EVENTS_KEEP_DAYS = 90
"""Days of events the daemon keeps unless the site says otherwise."""
PRIORITIES = ("low", "normal", "high")
"""Job priorities, lowest first."""

_LIMITS: dict[str, type] = {
    "max_priority": str,
    "max_gpus": int,
    "opportunistic_only": bool,
    "default_time": str,
    "max_time": str,
}
KNOWN: dict[str, dict[str, type]] = {
    "store": {"url": str},
    "security": {
        "admin_group": str,
        "allow_root_jobs": bool,
        "mount_prefixes": list,
        "network": str,
        "pids_limit": int,
        "memory_limit_mb": int,
    },
    "limits": _LIMITS,
    "events": {"keep_days": int},
}
"""Sections, keys and value types a config file may hold (besides ``[users.NAME]``)."""
SITE_SECTIONS = frozenset({"security", "limits", "users", "events"})
"""Sections of the site's policy: read from the system config only."""
NETWORKS = ("host", "bridge", "none")
"""Network modes a job container may be given."""

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


_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", list: "a list"}


def _check(path: Path, where: str, values: object, known: Mapping[str, type]) -> None:
    """One table's keys and value types, against ``known``."""
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: [{where}] must be a table")
    for key, value in values.items():
        want = known.get(key)
        if want is None:
            raise ConfigError(f"{path}: unknown key {key!r} in [{where}]")
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ConfigError(f"{path}: [{where}] {key} must be {_TYPE_NAMES[want]}")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: [{where}] {key} must be a list of strings")


def read_config(path: Path) -> dict[str, dict[str, Any]]:
    """One config file's contents, checked against the known keys; {} if it does not exist."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a gctl config") from None
    except (OSError, ValueError) as exc:  # ValueError: TOMLDecodeError, or a huge integer
        raise ConfigError(f"{path}: {exc}") from None
    for section, values in data.items():
        if section == "users":
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: [users] must hold [users.NAME] tables")
            for name, limits in values.items():
                _check(path, f"users.{name}", limits, _LIMITS)
            continue
        if section not in KNOWN:
            raise ConfigError(f"{path}: unknown section [{section}]")
        _check(path, section, values, KNOWN[section])
    return data


def resolve(db: str | None = None) -> Settings:
    """Settings from ``--db`` (when given), the environment, config files and defaults."""
    if db:
        return Settings(db, "--db")
    env = os.environ.get("GCTL_DB")
    if env:
        return Settings(env, "$GCTL_DB")
    for path in (user_config_path(), SYSTEM_CONFIG):
        data = read_config(path)
        if path != SYSTEM_CONFIG and not is_root() and SITE_SECTIONS & data.keys():
            found = ", ".join(f"[{s}]" for s in sorted(SITE_SECTIONS & data.keys()))
            raise ConfigError(f"{path}: {found} is the site's policy: set it in {SYSTEM_CONFIG}")
        url = data.get("store", {}).get("url")
        if isinstance(url, str) and url:
            return Settings(url, str(path))
    return Settings(str(default_db_path()), "default")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one user may ask for: highest priority, GPUs at once (0: any), opportunistic only.

    ``default_time`` is the time limit of a job submitted without ``--time``
    (unset: ``max_time``, as Slurm's partitions do) and ``max_time`` the
    longest one may ask for, in seconds (None: none), written in Slurm's
    notation in the file (``1-00:00:00``).
    """

    max_priority: str = "normal"
    max_gpus: int = 0
    opportunistic_only: bool = False
    default_time: float | None = None
    max_time: float | None = None


@dataclass(frozen=True, slots=True)
class SitePolicy:
    """The site's policy: operators, job containers' sandbox, users' limits.

    ``admin_group``'s members (and root) are operators. A job container runs
    as its submitter's uid:gid (as root only when ``allow_root_jobs`` and an
    operator submitted it), binds host paths only under ``mount_prefixes``,
    gets ``network`` as its network mode and at most ``pids_limit``
    processes and ``memory_limit_mb`` of memory (None: the engine's default).
    """

    admin_group: str = "gctl-admin"
    allow_root_jobs: bool = False
    mount_prefixes: tuple[str, ...] = ()
    network: str = "host"
    pids_limit: int | None = 32768
    memory_limit_mb: int | None = None
    defaults: Limits = Limits()
    users: Mapping[str, Limits] = field(default_factory=dict)
    events_keep_days: int = EVENTS_KEEP_DAYS
    """Days the daemon keeps events (``[events] keep_days``; 0: forever)."""

    def limits_for(self, user: str) -> Limits:
        """The limits of ``user``: their own table, else the defaults."""
        return self.users.get(user, self.defaults)


def policy_path() -> Path:
    """The file the site's policy is read from: the system config, or ``$GCTL_CONFIG`` as root."""
    explicit = os.environ.get("GCTL_CONFIG")
    return Path(explicit) if explicit and is_root() else SYSTEM_CONFIG


def site_policy() -> SitePolicy:
    """The site's policy from :func:`policy_path`, defaults for what it does not say."""
    path = policy_path()
    data = read_config(path)
    security = data.get("security", {})
    network = security.get("network", "host")
    if network not in NETWORKS:
        raise ConfigError(f"{path}: [security] network must be one of {', '.join(NETWORKS)}")
    for key in ("pids_limit", "memory_limit_mb"):
        if key in security and security[key] < 1:
            raise ConfigError(f"{path}: [security] {key} must be at least 1")
    prefixes = tuple(security.get("mount_prefixes", ()))
    for prefix in prefixes:
        if not prefix.startswith("/") or prefix.rstrip("/") == "":
            raise ConfigError(f"{path}: [security] mount_prefixes: {prefix!r} is not a directory")
    return SitePolicy(
        admin_group=security.get("admin_group", "gctl-admin"),
        allow_root_jobs=security.get("allow_root_jobs", False),
        mount_prefixes=prefixes,
        network=network,
        pids_limit=security.get("pids_limit", 32768),
        memory_limit_mb=security.get("memory_limit_mb"),
        events_keep_days=_keep_days(path, data.get("events", {})),
        defaults=_limits(path, "limits", data.get("limits", {}), Limits()),
        users={
            name: _limits(path, f"users.{name}", table, Limits())
            for name, table in data.get("users", {}).items()
        },
    )


def _keep_days(path: Path, events: Mapping[str, Any]) -> int:
    """``[events] keep_days``: a whole number of days from 0 (forever)."""
    days = events.get("keep_days", EVENTS_KEEP_DAYS)
    if days < 0:
        raise ConfigError(f"{path}: [events] keep_days must be 0 (forever) or more")
    return int(days)


def _limits(path: Path, where: str, table: Mapping[str, Any], base: Limits) -> Limits:
    priority = table.get("max_priority", base.max_priority)
    if priority not in PRIORITIES:
        raise ConfigError(f"{path}: [{where}] max_priority must be one of {', '.join(PRIORITIES)}")
    gpus = table.get("max_gpus", base.max_gpus)
    if gpus < 0:
        raise ConfigError(f"{path}: [{where}] max_gpus must be 0 (no limit) or more")
    times: dict[str, float | None] = {}
    for key in ("default_time", "max_time"):
        try:
            times[key] = parse_time_limit(table[key], f"[{where}] {key}") if key in table else None
        except TimeFormatError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    default, most = times["default_time"], times["max_time"]
    if default is not None and most is not None and default > most:
        raise ConfigError(f"{path}: [{where}] default_time is longer than max_time")
    opportunistic = table.get("opportunistic_only", base.opportunistic_only)
    return Limits(priority, gpus, opportunistic, default, most)


def write_starter(path: Path, url: str) -> bool:
    """Write a starter config to ``path`` unless one exists; whether it was written.

    The system file is readable by all (it holds no secret, and users read
    the store's address from it); a user's own is theirs alone (0600, in a
    0700 directory), whatever the umask.
    """
    system = path == SYSTEM_CONFIG
    path.parent.mkdir(mode=0o755 if system else 0o700, parents=True, exist_ok=True)
    text = STARTER.format(url=url.replace("\\", "\\\\").replace('"', '\\"'))
    mode = 0o644 if system else 0o600
    try:  # O_EXCL: never over a file made meanwhile
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fd, mode)  # the umask may have taken bits away
        fh.write(text)
    return True
