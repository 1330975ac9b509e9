"""``gctl daemon``: the scheduler core acting on real hosts through the store."""

DAEMON_USER = "gctl-daemon"
"""Who the daemon's own actions (node state changes, events) are recorded as."""
