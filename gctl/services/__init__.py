"""Use cases over the state store; each owns its transaction. Called by the CLI, TUI and daemon."""
