"""Running the host agent here, as a host's ``python3`` runs it: one mode, JSON in and out."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from gctl.hosts import agent


def run_mode(mode: str, request: dict[str, Any]) -> dict[str, Any]:
    """Run one mode of :mod:`gctl.hosts.agent` with ``request`` on stdin; its JSON answer."""
    out = subprocess.run(
        [sys.executable, agent.__file__, mode],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    doc = json.loads(out.stdout)
    assert isinstance(doc, dict)
    return doc
