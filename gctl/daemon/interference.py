"""Interference learned online: co-runs measured on the hosts, and the predictor the policy gets.

Every introspective pass records, for each pack of two jobs whose speeds
have been measured since they began running together, each job's slow-down
(its progress rate alone over its rate packed) in the ``coruns`` table
(:func:`record_coruns`). :class:`Learned` fits one
:class:`~gctl.core.interference.Predictor` per GPU type to those co-runs,
with gavel's pair table as the prior for the model kinds it measured
(:func:`gctl.sim.pairs.fitted`, as the simulator's policy gets it), and
refits only when co-runs were added. The
oldest rows beyond :data:`MAX_CORUNS` are dropped.
"""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Engine

from gctl.core import packing
from gctl.core.interference import CoRun, Interference
from gctl.core.model import JobStatus
from gctl.sim import pairs
from gctl.store.engine import transaction
from gctl.store.models import CoRunRow
from gctl.store.snapshot import Snapshot

MAX_CORUNS = 10_000
"""Co-run rows kept; the oldest go first."""
CHANGE = 0.02
"""Relative change of a pack's measured slow-down that is written (smaller ones are noise)."""


def record_coruns(engine: Engine, snap: Snapshot, now: float) -> int:
    """Record the measured slow-downs of every measured pack of two; how many packs were seen."""
    state = snap.state
    found: list[CoRunRow] = []
    for key in state.shared:
        members = state.member_jobs(key)
        if len(members) != 2 or any(m.status is not JobStatus.RUNNING for m in members):
            continue
        rates = packing.pack_rates(state, key)
        since = members[0].packed_at
        if rates is None or since is None or min(rates) <= 0:
            continue
        gpu_type = state.gpu_type(key[0])
        a, b = members
        for js, other, rate in ((a, b, rates[0]), (b, a, rates[1])):
            found.append(
                CoRunRow(
                    job_id=snap.job_ids[js.id],
                    partner_id=snap.job_ids[other.id],
                    packed_at=since,
                    kind=js.spec.profile or "",
                    partner_kind=other.spec.profile or "",
                    gpu_type=gpu_type,
                    slowdown=1.0 / rate,
                    at=now,
                )
            )
    if not found:
        return 0
    with transaction(engine, write=True) as s:
        for row in found:
            old = s.scalar(
                select(CoRunRow).where(
                    CoRunRow.job_id == row.job_id,
                    CoRunRow.partner_id == row.partner_id,
                    CoRunRow.packed_at == row.packed_at,
                )
            )
            if old is None:
                s.add(row)
            elif abs(old.slowdown / row.slowdown - 1) > CHANGE:
                old.slowdown, old.at = row.slowdown, row.at
        s.flush()
        total = s.scalar(select(func.count()).select_from(CoRunRow)) or 0
        if total > MAX_CORUNS:
            cut = s.scalar(
                select(CoRunRow.id).order_by(CoRunRow.id.desc()).offset(MAX_CORUNS).limit(1)
            )
            s.execute(delete(CoRunRow).where(CoRunRow.id <= cut))
    return len(found)


class Learned:
    """The predictor from the store's co-runs and the pair table, refitted when co-runs change."""

    def __init__(self) -> None:
        """Nothing fitted yet."""
        self._version: tuple[int, int, float] | None = None
        """Count, newest id and sum of slow-downs of the co-runs last fitted."""
        self._fitted = Interference()

    def interference(self, engine: Engine) -> Interference:
        """The current predictor (fitted afresh only when the co-runs changed)."""
        with transaction(engine, write=False) as s:
            version = s.execute(
                select(
                    func.count(CoRunRow.id),
                    func.coalesce(func.max(CoRunRow.id), 0),
                    func.coalesce(func.sum(CoRunRow.slowdown), 0.0),
                )
            ).one()
            key = (int(version[0]), int(version[1]), float(version[2]))
            if key == self._version:
                return self._fitted
            rows = s.execute(
                select(CoRunRow.kind, CoRunRow.partner_kind, CoRunRow.gpu_type, CoRunRow.slowdown)
            ).all()
        observed: dict[str, list[CoRun]] = {}
        for kind, partner, gpu_type, slowdown in rows:
            if slowdown > 0:
                observed.setdefault(gpu_type.lower(), []).append(CoRun(kind, partner, slowdown))
        self._fitted = pairs.fitted(observed)
        self._version = key
        return self._fitted
