"""The pair table as interference knowledge: the prior of every interference predictor.

The simulator's performance model packs jobs at gavel's measured pair speeds
(:func:`gctl.sim.profiles.packed_speeds`). A scheduler on real hosts knows
such a table only for the model kinds someone measured; this module gives the
simulated policy the same: one :class:`~gctl.core.interference.Predictor`
per GPU type, fitted to the table's pairs of the trace models, with each
model's utilisation and memory as its features (a job of unknown model is
predicted from its nearest neighbour, or the default). The daemon fits its
predictors the same way, with the co-runs it measured on the hosts added
(:func:`fitted`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def fitted(observed: Mapping[str, Sequence[CoRun]] | None = None) -> Interference:
    """Predictors of every GPU type with data, fitted to the pair table and ``observed``.

    ``observed`` holds measured co-runs by GPU type (lower-case), which also
    give types without table data a predictor; V100's serves other types.
    """
    seen = observed or {}
    features = {
        name: Features(p.gpu_util, float(p.gpu_mem_mb))
        for name in profiles.known_models()
        for p in (profiles.profile_for(name),)
    }
    types = sorted(set(profiles.GPU_MEMORY_MB) | set(seen))
    by_type = {
        gpu: Predictor.fit(
            table_coruns(gpu) if gpu in profiles.GPU_MEMORY_MB else (),
            seen.get(gpu, ()),
            features,
        )
        for gpu in types
    }
    return Interference(by_type, other=by_type[profiles.DEFAULT_GPU_TYPE])


@cache
def table_interference() -> Interference:
    """:func:`fitted` to the pair table alone, once: what the simulated policy predicts from."""
    return fitted()
