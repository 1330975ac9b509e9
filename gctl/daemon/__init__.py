"""``gctl daemon``: the scheduler core acting on real hosts through the store."""
