"""A ``gctl daemon`` run in a thread of a test, for the host tests."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from gctl.core.policy import load_policy
from gctl.daemon.loop import Daemon, DaemonConfig
from gctl.daemon.metrics import DaemonMetrics
from gctl.services import db


class Running:
    """The daemon the command runs, in a thread with short periods, until :meth:`close`.

    ``config`` overrides :class:`DaemonConfig` fields; ``policy_options``
    (default a 2 s quantum) go to the gandiva policy.
    """

    def __init__(self, store: db.Store, tmp: Path, **config: Any) -> None:
        options = config.pop("policy_options", {"quantum": 2.0})
        cfg = {
            "tick": 0.3,
            "introspect_every": 1.0,
            "heartbeat_every": 0.5,
            "reconcile_every": 2.0,
            "grace": 10.0,
            "state_dir": tmp / "state",
        }
        cfg.update(config)
        self.daemon = Daemon(
            store, load_policy("gandiva", **options), DaemonConfig(**cfg), DaemonMetrics(store)
        )
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.daemon.run(self.stop)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def close(self) -> None:
        """Stop the daemon (jobs keep running on their hosts) and report its failure."""
        self.stop.set()
        self.thread.join(60)
        assert self.error is None, self.error
