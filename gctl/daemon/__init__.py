"""``gctl daemon``: the scheduler core acting on real hosts through the store."""

DAEMON_USER = "gctl-daemon"
"""Who the daemon's own actions (node state changes, events) are recorded as."""
NO_DAEMON = "no daemon holds this store now: nothing happens until one runs (gctl daemon)"
"""What a command that leaves work to the daemon adds when none runs."""
