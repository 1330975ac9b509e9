"""The light hosts of ``scripts/scalehosts.sh``, for the tests and ``bench/scale.py``.

:func:`scalehosts` runs the harness on hosts of a caller's own (a directory
and a port no other user of it shares); :func:`light_store` records the
hosts it describes as nodes of a fresh store.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from scriptkit import REPO_ROOT

from gctl.services import db, nodes


def scalehosts(directory: str, port: str, *args: str) -> str:
    """Run ``scripts/scalehosts.sh ARGS`` on the hosts of ``directory`` and ``port``; its stdout."""
    env = {**os.environ, "GCTL_SCALEHOSTS_DIR": directory, "GCTL_SCALEHOSTS_PORT": port}
    out = subprocess.run(
        [str(REPO_ROOT / "scripts" / "scalehosts.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def light_store(info: dict[str, Any], url: str, gpus: str = "8xV100-16GB") -> db.Store:
    """A fresh store at ``url`` with every host of ``info`` (the harness's JSON) as a node."""
    store = db.connect(url)
    db.upgrade(store)
    nodes.add_nodes(
        store,
        [
            nodes.NodeSpec(
                h["name"],
                h["host"],
                h["fingerprint"],
                port=h["port"],
                ssh_user=h["user"],
                key_path=info["key"],
                emulate_gpus=gpus,
                docker_host=h["docker_host"],
                work_dir=h["work_dir"],
            )
            for h in info["hosts"]
        ],
    )
    return store
