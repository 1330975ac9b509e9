"""A job's directory on its hosts: progress reports, and moving checkpoints between hosts.

The job SDK (:mod:`gctl.job`) writes ``progress.json`` and ``checkpoint.json``
into the job directory. Each attempt of a job has its own directory on a
host (``WORKDIR/stores/<store>/jobs/<id>/a<attempt>``, made by the host
agent, :mod:`gctl.hosts.agent`, seeded from the job's newest earlier one
there), so a stale run of an older attempt can never overwrite the current
attempt's checkpoint. The daemon reads reports over SSH, and keeps a copy of
the latest checkpointed directory in its own *mirror*, per store and per
attempt, so a job whose host died can restart from its last checkpoint
elsewhere; a move copies the directory to another host as one ``tar``
stream. Checkpoints too big to stream this way belong on shared storage the
job mounts; the job directory is for small state.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gctl.config import default_db_path
from gctl.hosts import agent
from gctl.hosts.agent_link import AgentLinks
from gctl.hosts.ssh import Pool, Target

_AGENT = Path(agent.__file__).read_text(encoding="utf-8")
"""The host agent's source, run by the host's ``python3 -c``."""


def agent_argv(mode: str) -> list[str]:
    """The command that runs one mode of :mod:`gctl.hosts.agent` on a host.

    Isolated (``-I``: no environment variables, no user site) and without
    the ``site`` module (``-S``): the agent needs only the standard library,
    and a long-running one costs the host 3 MiB less.
    """
    return ["python3", "-I", "-S", "-c", _AGENT, mode]


def run_agent(pool: Pool, target: Target, mode: str, request: dict[str, Any]) -> dict[str, Any]:
    """Run one mode of :mod:`gctl.hosts.agent` on the host; its JSON answer."""
    stdin = json.dumps(request).encode()
    res = pool.run_ok(target, agent_argv(mode), f"gctl agent {mode}", stdin=stdin)
    return res.json_object(target.node, f"gctl agent {mode}")


@dataclass(frozen=True, slots=True)
class Report:
    """What a job's directory says: its last progress report and last checkpoint."""

    progress: dict[str, Any] | None
    checkpoint_step: int | None
    checkpoint_time: float | None

    @property
    def uses_sdk(self) -> bool:
        """Whether the job uses the job SDK (and so checkpoints when asked).

        Its progress report says so, and so does any checkpoint: only the SDK
        writes one.
        """
        return bool(self.progress and self.progress.get("sdk")) or self.checkpoint_time is not None

    @property
    def done(self) -> float | None:
        """The fraction of its steps the job reports done (0..1), None when it reports no total."""
        p = self.progress or {}
        step, steps = p.get("step"), p.get("steps")
        if not isinstance(step, int) or not isinstance(steps, int) or steps <= 0:
            return None
        return min(max(step / steps, 0.0), 1.0)

    @property
    def finished(self) -> bool:
        """Whether the job said its work is done: the SDK's final report, or every step reached."""
        p = self.progress or {}
        if p.get("done") is True:
            return True
        step, steps = p.get("step"), p.get("steps")
        return isinstance(step, int) and isinstance(steps, int) and steps > 0 and step >= steps

    @property
    def rate_since(self) -> float | None:
        """When (the host's clock) the window of steps its rate was measured over began.

        None when the report gives no such window (an SDK before ``span``).
        A frozen job's window holds the time it was frozen: a rate measured
        across a freeze is a rate of neither stretch.
        """
        p = self.progress or {}
        at, span = p.get("time"), p.get("span")
        if not isinstance(at, int | float) or not isinstance(span, int | float):
            return None
        return float(at) - float(span)


def report_of(doc: dict[str, Any]) -> Report:
    """A report from the agent's summary of one job directory."""
    ckpt = doc.get("checkpoint") or {}
    step, at = ckpt.get("step"), ckpt.get("time")
    progress = doc.get("progress")
    return Report(
        progress if isinstance(progress, dict) else None,
        step if isinstance(step, int) else None,
        float(at) if isinstance(at, int | float) else None,
    )


def read_reports(pool: Pool, target: Target, dirs: list[str]) -> dict[str, Report]:
    """Every job directory's report on one host (missing files give empty reports)."""
    if not dirs:
        return {}
    got = run_agent(pool, target, "observe", {"dirs": dirs}).get("reports") or {}
    return {d: report_of(got.get(d) or {}) for d in dirs}


def prepare(
    agents: AgentLinks,
    target: Target,
    base: str,
    attempt: int,
    owner: str | None = None,
    shared: list[str] | None = None,
    *,
    timeout: float,
) -> float | None:
    """Make attempt ``attempt``'s directory under ``base`` (see the agent); its checkpoint time.

    An existing one is left as it is (a start tried again); a new one is
    seeded from the job's newest earlier attempt on the host, else empty.
    It is ``owner``'s (``uid:gid``), private to them; ``shared`` directories
    (the node's emulated GPUs) are made writable by every job. Asked of the
    node's long-running agent (:mod:`gctl.hosts.agent_link`), within
    ``timeout`` seconds: every start does this, and an SSH session and a
    ``python3`` start of its own each time were most of a start's cost on
    a busy host.
    """
    request = {"base": base, "attempt": attempt, "owner": owner, "shared": shared or []}
    at = agents.ask(target, "prepare", request, timeout).get("checkpoint_time")
    return float(at) if isinstance(at, int | float) else None


def pack(pool: Pool, target: Target, job_dir: str) -> bytes:
    """The job directory as a tar stream (empty directory when it does not exist yet)."""
    pool.run_ok(target, ["mkdir", "-p", job_dir], f"mkdir {job_dir}")
    return pool.run_ok(target, ["tar", "-C", job_dir, "-cf", "-", "."], f"tar of {job_dir}").stdout


def unpack(pool: Pool, target: Target, job_dir: str, data: bytes) -> None:
    """Write a tar stream of a job directory into ``job_dir`` on the host."""
    pool.run_ok(target, ["mkdir", "-p", job_dir], f"mkdir {job_dir}")
    pool.run_ok(target, ["tar", "-C", job_dir, "-xf", "-"], f"untar into {job_dir}", stdin=data)


def mirror_dir(state_dir: Path | None) -> Path:
    """Where the daemon keeps its copies: ``STATE_DIR/checkpoints`` (default: by the database)."""
    return (state_dir or default_db_path().parent) / "checkpoints"


class Mirror:
    """The daemon's own copy of each job's directory: a tar file per store, job and attempt.

    Made private to the daemon's user (0700), whatever the umask: a job's
    checkpoint is its owner's data. Safe to use from several threads: a
    heartbeat may copy an attempt that ended while a move copies it too.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()

    def _dir(self, job_id: int) -> Path:
        return self.root / str(job_id)

    def _copies(self, job_id: int) -> list[tuple[int, Path]]:
        """The job's copies, by attempt, newest last."""
        try:
            names = os.listdir(self._dir(job_id))
        except FileNotFoundError:
            return []
        found = [(int(n[1:-4]), self._dir(job_id) / n) for n in names if _is_copy(n)]
        return sorted(found)

    def save(self, job_id: int, attempt: int, data: bytes, checkpoint_time: float | None) -> None:
        """Keep ``data`` as the copy of the job's attempt (written aside and renamed).

        Copies of older attempts go: this one is newer than any of theirs.
        """
        folder = self._dir(job_id)
        path = folder / f"a{attempt}.tar"
        with self._lock:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            at = checkpoint_time or 0.0  # the copy's mtime is its checkpoint's time
            os.utime(path, (at, at))
            for older, old in self._copies(job_id):
                if older < attempt:
                    old.unlink(missing_ok=True)

    def load(self, job_id: int) -> bytes | None:
        """The job's newest copy, or None."""
        copies = self._copies(job_id)
        try:
            return copies[-1][1].read_bytes() if copies else None
        except FileNotFoundError:
            return None

    def checkpoint_time(self, job_id: int) -> float | None:
        """When the checkpoint in the job's newest copy was taken (None: no copy)."""
        copies = self._copies(job_id)
        try:
            return copies[-1][1].stat().st_mtime if copies else None
        except FileNotFoundError:
            return None

    def drop(self, job_id: int) -> None:
        """Forget a finished job's copies."""
        with self._lock:
            for _, path in self._copies(job_id):
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self._dir(job_id).rmdir()


def _is_copy(name: str) -> bool:
    return name.startswith("a") and name.endswith(".tar") and name[1:-4].isdigit()
