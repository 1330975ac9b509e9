"""A job's directory on its hosts: progress reports, and moving checkpoints between hosts.

The job SDK (:mod:`gctl.job`) writes ``progress.json`` and ``checkpoint.json``
into the job directory (``WORKDIR/jobs/<id>`` on the host). The daemon reads
them over SSH, copies the directory to another host when a job moves (one
``tar`` stream through the daemon), and keeps a copy of the latest one in its
own *mirror* so a job whose host died can still restart from its last
checkpoint elsewhere. Checkpoints that are too big to stream this way belong
on shared storage the job mounts; the job directory is for small state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gctl.config import default_db_path
from gctl.hosts.ssh import Pool, Target
from gctl.job import CHECKPOINT_FILE, PROGRESS_FILE

_READ = f"""
import json, sys
out = {{}}
for d in sys.argv[1:]:
    got = {{}}
    for key, name in (("progress", {PROGRESS_FILE!r}), ("checkpoint", {CHECKPOINT_FILE!r})):
        try:
            with open(d + "/" + name) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        if key == "checkpoint":
            doc = {{"step": doc.get("step"), "time": doc.get("time")}}
        got[key] = doc
    out[d] = got
json.dump(out, sys.stdout)
"""
"""Reads progress and checkpoint summaries of job directories (run by the host's python3)."""


@dataclass(frozen=True, slots=True)
class Report:
    """What a job's directory says: its last progress report and last checkpoint."""

    progress: dict[str, Any] | None
    checkpoint_step: int | None
    checkpoint_time: float | None

    @property
    def uses_sdk(self) -> bool:
        """Whether the job reports through the job SDK (and so checkpoints when asked)."""
        return bool(self.progress and self.progress.get("sdk"))

    @property
    def finished(self) -> bool:
        """Whether the last report says every step is done."""
        p = self.progress or {}
        step, steps = p.get("step"), p.get("steps")
        return isinstance(step, int) and isinstance(steps, int) and steps > 0 and step >= steps


def read_reports(pool: Pool, target: Target, dirs: list[str]) -> dict[str, Report]:
    """Every job directory's report on one host (missing files give empty reports)."""
    if not dirs:
        return {}
    res = pool.run_ok(target, ["python3", "-c", _READ, *dirs], "reading job progress")
    doc = res.json_object(target.node, "reading job progress")
    out: dict[str, Report] = {}
    for d in dirs:
        got = doc.get(d) or {}
        ckpt = got.get("checkpoint") or {}
        step, at = ckpt.get("step"), ckpt.get("time")
        out[d] = Report(
            got.get("progress"),
            step if isinstance(step, int) else None,
            float(at) if isinstance(at, int | float) else None,
        )
    return out


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
    """The daemon's own copy of each job's directory, as a tar file per job."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, job_id: int) -> Path:
        return self.root / f"{job_id}.tar"

    def save(self, job_id: int, data: bytes, checkpoint_time: float | None) -> None:
        """Keep ``data`` as the job's copy (written aside and renamed, so never half-written)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(job_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        at = checkpoint_time or 0.0  # the copy's mtime is its checkpoint's time
        os.utime(path, (at, at))

    def load(self, job_id: int) -> bytes | None:
        """The job's copy, or None."""
        try:
            return self._path(job_id).read_bytes()
        except FileNotFoundError:
            return None

    def checkpoint_time(self, job_id: int) -> float | None:
        """When the checkpoint in the job's copy was taken (None: no copy)."""
        try:
            return self._path(job_id).stat().st_mtime
        except FileNotFoundError:
            return None

    def drop(self, job_id: int) -> None:
        """Forget a finished job's copy."""
        self._path(job_id).unlink(missing_ok=True)
