"""Trace-driven simulator: a virtual clock driving the same scheduler core as the daemon."""
