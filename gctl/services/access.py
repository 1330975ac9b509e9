"""Who may do what: operators, job owners, users' limits, and what a job container may bind.

The rules every way in applies (the CLI, the dashboard, the daemon before a
container starts); on PostgreSQL the database's row-level security enforces
the ownership rules once more, for a user who connects without gctl.

- Operators (:mod:`gctl.identity`) manage nodes, the daemon, the store and
  every job. Anyone else acts on their own jobs only.
- A user's jobs ask for at most their ``max_priority``, at most
  ``max_gpus`` GPUs at once (0: no limit), and only the opportunistic class
  when ``opportunistic_only`` (``[limits]``, ``[users.NAME]``).
- A job binds host paths only under the site's ``mount_prefixes`` (none by
  default: only its own job directory), never ``/``, the system's own trees
  or a container engine's socket.
- A job's container runs as its user's uid:gid, checked against the user
  database of the host that starts it.
"""

from __future__ import annotations

import dataclasses
import posixpath
import pwd
from collections.abc import Iterable, Sequence

from gctl import config
from gctl.config import PRIORITIES, SitePolicy
from gctl.hosts.mounts import Mount
from gctl.identity import Who, who
from gctl.services.db import Store
from gctl.services.errors import ServiceError
from gctl.slurmtime import format_time_limit

NEVER_BOUND = (
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/etc",
    "/root",
    "/run",
    "/var/run",
    "/var/lib/docker",
)
"""Host trees no job may bind, whatever the site's prefixes say."""
SOCKETS = ("docker.sock", "containerd.sock", "podman.sock", "crio.sock")
"""Container engines' sockets: binding one is root on the host."""


class Forbidden(ServiceError):
    """The caller may not do this; the message says who may."""


def caller(store: Store | None = None) -> tuple[Who, SitePolicy]:
    """The user this process acts for on ``store``, and the site's policy.

    On SQLite the store file's permissions are the boundary (private to
    operators, or a user's own store): whoever can open it runs it.
    """
    policy = config.site_policy()
    me = who(policy.admin_group)
    if store is not None and store.engine.dialect.name == "sqlite":
        me = dataclasses.replace(me, operator=True)
    return me, policy


def operator_only(store: Store, what: str) -> Who:
    """The caller, when an operator of ``store``; Forbidden otherwise."""
    me, policy = caller(store)
    require_operator(me, what, policy)
    return me


def require_operator(me: Who, what: str, policy: SitePolicy) -> None:
    """Refuse ``what`` unless the caller is an operator."""
    if not me.operator:
        raise Forbidden(
            f"{what} is for operators (root, group {policy.admin_group}); you are {me.login}"
        )


def require_owner(me: Who, owner: str, job_id: int, what: str) -> None:
    """Refuse ``what`` on another user's job unless the caller is an operator."""
    if not me.operator and owner != me.name:
        raise Forbidden(f"job {job_id} is {owner}'s: {what} is for its owner or an operator")


def check_mounts(mounts: Sequence[Mount], policy: SitePolicy) -> None:
    """Refuse a bind of a host path the site does not allow (module docstring)."""
    for m in mounts:
        src = posixpath.normpath(m.src)
        if src == "/" or m.src.split("/").count(".."):
            raise Forbidden(f"--mount {m.src}: not a host path a job may bind")
        if any(src == t or src.startswith(t + "/") for t in NEVER_BOUND):
            raise Forbidden(
                f"--mount {m.src}: the host's own {src.split('/')[1]} tree is never bound"
            )
        if posixpath.basename(src) in SOCKETS:
            raise Forbidden(f"--mount {m.src}: a container engine's socket is never bound")
        allowed = [p.rstrip("/") for p in policy.mount_prefixes]
        if not any(src == p or src.startswith(p + "/") for p in allowed):
            where = ", ".join(policy.mount_prefixes) or "none: only the job's own directory"
            raise Forbidden(f"--mount {m.src}: outside the host paths jobs may bind ({where})")


def check_requests(
    me: Who,
    policy: SitePolicy,
    priorities: Iterable[str],
    classes: Iterable[str],
    gpus: Iterable[int],
    held: int,
) -> None:
    """Refuse jobs beyond the caller's limits; ``held`` is what their unfinished jobs ask for.

    Operators have no limits.
    """
    if me.operator:
        return
    limits = policy.limits_for(me.name)
    top = PRIORITIES.index(limits.max_priority)
    for priority in priorities:
        if PRIORITIES.index(priority) > top:
            raise Forbidden(
                f"--priority {priority}: {me.name} may ask for {limits.max_priority} at most"
            )
    if limits.opportunistic_only and any(c != "opportunistic" for c in classes):
        raise Forbidden(f"{me.name} may submit opportunistic jobs only (--class opportunistic)")
    total = held + sum(gpus)
    if limits.max_gpus and total > limits.max_gpus:
        raise Forbidden(
            f"{me.name} may ask for {limits.max_gpus} GPUs at once; with these, {total}"
        )


def time_limit(me: Who, policy: SitePolicy, asked: float | None, *, given: bool) -> float | None:
    """The time limit a new job gets: ``asked`` (``--time``, when ``given``), else the default.

    A job without ``--time`` gets the caller's ``default_time``, else their
    ``max_time``; one asking for more than ``max_time`` (or for no limit
    where there is one) is refused, as ``sbatch`` refuses it. Operators may
    ask for any limit.
    """
    limits = policy.limits_for(me.name)
    if not given:
        return limits.default_time if limits.default_time is not None else limits.max_time
    most = limits.max_time
    if most is not None and not me.operator and (asked is None or asked > most):
        raise Forbidden(
            f"--time {format_time_limit(asked)}: {me.name} may ask for"
            f" {format_time_limit(most)} at most"
        )
    return asked


def container_user(user: str, uid: int | None, gid: int | None, policy: SitePolicy) -> str:
    """The ``uid:gid`` a job's container runs as; why it may not run, as a Forbidden.

    The user's own ids, checked against this host's user database (a stored
    job claiming another user's uid never gets it), unless the site runs
    every job as root (``allow_root_jobs``: images that need it).
    """
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise Forbidden(
            f"user {user} is unknown on this host: the job cannot run as them"
        ) from None
    if (uid, gid) != (entry.pw_uid, entry.pw_gid):
        raise Forbidden(
            f"the job was recorded with uid:gid {uid}:{gid}, but {user} is"
            f" {entry.pw_uid}:{entry.pw_gid} here"
        )
    return "0:0" if policy.allow_root_jobs else f"{uid}:{gid}"
