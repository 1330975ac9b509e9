"""The pair table as interference knowledge: what the simulator's policy may predict from.

The simulator's performance model packs jobs at gavel's measured pair speeds
(:func:`gctl.sim.profiles.packed_speeds`). A scheduler on real hosts knows
such a table only for the model kinds someone measured; this module gives the
simulated policy the same: one :class:`~gctl.core.interference.Predictor`
per GPU type, fitted to the table's pairs of the trace models, with each
model's utilisation and memory as its features (a job of unknown model is
predicted from its nearest neighbour, or the default).
"""

from __future__ import annotations

from functools import cache

from gctl.core.interference import CoRun, Features, Interference, Predictor
from gctl.sim import profiles


def table_coruns(gpu_type: str) -> list[CoRun]:
    """Every packable pair of trace models on ``gpu_type``, as two co-runs."""
    names = profiles.known_models()
    out: list[CoRun] = []
    for a in names:
        for b in names:
            speeds = profiles.packed_speeds(a, b, gpu_type=gpu_type)
            if speeds is not None:
                out.append(CoRun(a, b, 1.0 / speeds[0]))
    return out


@cache
def table_interference() -> Interference:
    """Predictors of every GPU type with data, fitted once; V100's for other types."""
    features = {
        name: Features(p.gpu_util, float(p.gpu_mem_mb))
        for name in profiles.known_models()
        for p in (profiles.profile_for(name),)
    }
    by_type = {
        gpu: Predictor.fit(prior=table_coruns(gpu), features=features)
        for gpu in profiles.GPU_MEMORY_MB
    }
    return Interference(by_type, other=by_type[profiles.DEFAULT_GPU_TYPE])
