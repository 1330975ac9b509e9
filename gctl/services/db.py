"""Opening the state store for a command, and creating or upgrading its schema."""

from __future__ import annotations

import grp
import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import URL, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import SQLAlchemyError as _SAError

from gctl import config
from gctl.limits import TEXT_MAX, check_text
from gctl.services.reader import require_head
from gctl.store import schema
from gctl.store.engine import StoreError, make_engine, parse_url, sqlite_path


@dataclass(frozen=True, slots=True)
class Store:
    """An opened store: its engine and where the choice of database came from.

    ``url`` is for messages (password masked); ``config_url`` is what a
    config file may hold: the URL without its password, which belongs in
    ``~/.pgpass`` or ``$PGPASSWORD`` instead.
    """

    engine: Engine
    url: str
    source: str
    config_url: str


def connect(db: str | None = None) -> Store:
    """The store named by ``--db``, the environment, config files or the default."""
    settings = config.resolve(db)
    check_text(settings.db, f"database (from {settings.db_source})", limit=TEXT_MAX)
    url = parse_url(settings.db)
    try:
        engine = make_engine(url)
    except (ImportError, _SAError) as exc:
        raise StoreError(f"cannot use database {url.render_as_string()}: {exc}") from None
    return Store(
        engine,
        url.render_as_string(hide_password=True),
        settings.db_source,
        URL.create(
            url.drivername, url.username, None, url.host, url.port, url.database, url.query
        ).render_as_string(hide_password=False),
    )


def open_store(db: str | None = None) -> Store:
    """The store, checked to be at the schema this gctl expects."""
    store = connect(db)
    require_head(revision(store), store.url)
    return store


def require_file(store: Store) -> None:
    """Raise StoreError when the store is a SQLite file that does not exist."""
    path = sqlite_path(store.engine.url)
    if path is not None and not path.exists():
        raise StoreError(f"no gctl database at {store.url}; run 'gctl init' first")


def revision(store: Store) -> str | None:
    """The schema revision of the store (None when empty, or a SQLite file that does not exist).

    A missing SQLite file is not created: reading never leaves a database behind.
    """
    path = sqlite_path(store.engine.url)
    if path is not None and not path.exists():
        return None
    try:
        return schema.current(store.engine)
    except OperationalError as exc:
        raise StoreError(f"cannot open database {store.url}: {exc.orig}") from None


@dataclass(frozen=True, slots=True)
class ConfigOutcome:
    """What ``gctl init`` did about a config file: the file, whether written, and why."""

    path: Path
    written: bool
    message: str
    refused: bool = False
    """Writing was asked for (``--write-config``) and did not happen."""


def _shown(target: str) -> str:
    """A database URL or path as messages show it (password masked)."""
    try:
        return parse_url(target).render_as_string(hide_password=True)
    except StoreError:
        return target


def starter_config(store: Store, want: bool | None) -> ConfigOutcome:
    """Write a config naming ``store`` where ``gctl init`` keeps it, when that is wanted.

    ``want`` True writes (never over an existing file), False never writes;
    None writes only where nobody would be surprised: the database is the
    default one, or was named by ``--db`` for this user's own config. A
    database named by ``$GCTL_DB`` is often a throwaway, so it is never
    written on its own, and ``--db`` never changes the system-wide file
    unless asked.
    """
    path = config.starter_config_path()
    if want is False:
        return ConfigOutcome(path, False, "no config written (--no-config)")
    if path.exists():
        try:
            named = config.read_config(path).get("store", {}).get("url")
        except config.ConfigError:
            named = None
        same = isinstance(named, str) and _shown(named) == store.url
        what = "it names this database" if same else f"it names {named or 'no database'}"
        return ConfigOutcome(
            path, False, f"config {path} exists, left unchanged ({what})", refused=bool(want)
        )
    if want is None:
        hint = f"'gctl init --write-config' records it in {path}"
        if store.source == "$GCTL_DB":
            why = f"the database came from $GCTL_DB; {hint}"
            return ConfigOutcome(path, False, f"no config written: {why}")
        if store.source not in ("default", "--db"):
            return ConfigOutcome(path, False, f"no config written: {store.source} names it")
        if store.source == "--db" and path == config.SYSTEM_CONFIG:
            why = f"--db does not change the system-wide default; {hint}"
            return ConfigOutcome(path, False, f"no config written: {why}")
    if not config.write_starter(path, store.config_url):  # made meanwhile
        return ConfigOutcome(path, False, f"config {path} exists, left unchanged", bool(want))
    return ConfigOutcome(path, True, f"wrote config {path} (store url {store.config_url})")


def make_private(path: Path) -> None:
    """Create an empty SQLite store file that only operators can open, whatever the umask.

    0600 for its owner; 0660 when the site's admin group exists (its
    members are operators too), and so for a new directory above it. The
    store holds every user's job specs, secrets among them: with SQLite,
    the file's permissions are the only boundary (multi-user sites use
    PostgreSQL, whose roles and row-level security divide the store).
    """
    try:
        gid: int | None = grp.getgrnam(config.site_policy().admin_group).gr_gid
    except KeyError:
        gid = None
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700 if gid is None else 0o770, parents=True)
        if gid is not None:
            os.chown(path.parent, -1, gid)
    mode = 0o600 if gid is None else 0o660
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        if gid is not None:
            os.fchown(fd, -1, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def upgrade(store: Store) -> tuple[str | None, str]:
    """Bring the store to the newest schema; returns (before, after)."""
    path = sqlite_path(store.engine.url)
    if path is not None and not path.exists():
        make_private(path)
    before = revision(store)
    try:
        schema.upgrade(store.engine)
    except OperationalError as exc:
        raise StoreError(f"cannot upgrade database {store.url}: {exc.orig}") from None
    return before, schema.head()
