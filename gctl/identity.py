"""Who runs a gctl command: the operating system's word, never an environment variable's.

The user is the login of the process's effective uid (``getpwuid``, not
``$USER`` or ``$LOGNAME``, which anyone may set). Operators are root and the
members of the site's admin group (``[security] admin_group``, default
``gctl-admin``): they manage nodes, the daemon and the store, act on
anyone's jobs, and may act *for* another user with ``$GCTL_USER=NAME``
(recorded as that user, with that user's uid and gid for the job's
container). ``$GCTL_USER`` set by anyone else is an error, not ignored, so
nobody believes they acted as someone they did not.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass

from gctl.limits import check_text
from gctl.services.errors import ServiceError

ACT_AS = "GCTL_USER"
"""The environment variable an operator names another user with."""


class IdentityError(ServiceError):
    """The caller asked to be someone they may not be, or is unknown to the system."""


@dataclass(frozen=True, slots=True)
class Who:
    """The user a command acts for, their numeric ids, and whether the caller is an operator.

    ``login`` is the caller's own login (different from ``name`` when an
    operator acts for another user); ``operator`` is the caller's standing.
    ``uid`` and ``gid`` are None for a user this host does not know, whose
    jobs an operator may submit but whose containers cannot run as them here.
    """

    name: str
    uid: int | None
    gid: int | None
    operator: bool
    login: str


def _member(name: str, gid: int, group: str) -> bool:
    """Whether the user ``name`` (primary group ``gid``) belongs to ``group``."""
    try:
        found = grp.getgrnam(group)
    except KeyError:
        return False
    return found.gr_gid == gid or name in found.gr_mem


def is_operator(name: str, uid: int, gid: int, admin_group: str) -> bool:
    """Whether a user is an operator: root, or a member of ``admin_group``."""
    return uid == 0 or _member(name, gid, admin_group)


def who(admin_group: str) -> Who:
    """The user this process acts for (module docstring)."""
    uid = os.geteuid()
    try:
        me = pwd.getpwuid(uid)
    except KeyError:
        raise IdentityError(f"uid {uid} has no entry in the user database") from None
    operator = is_operator(me.pw_name, uid, me.pw_gid, admin_group)
    other = os.environ.get(ACT_AS)
    if not other or other == me.pw_name:
        return Who(me.pw_name, uid, me.pw_gid, operator, me.pw_name)
    if not operator:
        raise IdentityError(
            f"${ACT_AS} is honoured only for operators (root, group {admin_group});"
            f" you are {me.pw_name}: unset it"
        )
    check_text(other, f"${ACT_AS}")
    try:
        them = pwd.getpwnam(other)
    except KeyError:
        return Who(other, None, None, True, me.pw_name)
    return Who(them.pw_name, them.pw_uid, them.pw_gid, True, me.pw_name)
