"""What the DL2 network sees: a row of features per job, a few global features, and their layout.

DL2's state per job is its model kind, the time it has run, its remaining
work, its dominant share and the workers it was given; here, for
all-reduce jobs on GPUs, the same in GPU terms (see :data:`JOB_FEATURES`).
The layout (the kinds of the one-hot part and the feature names) is stored
in the model file, and a model whose layout differs from this code's is
refused rather than fed columns it was not trained on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

FORMAT = 1
"""Version of the model file and its layout."""

OTHER_KIND = "default"
"""The one-hot slot of every kind the model was not trained on."""

JOB_FEATURES = (
    "asked",  # log2 of the GPUs it asked for, / 3
    "held",  # GPUs it held before this decision, / 8
    "given",  # GPUs given so far in this decision, / 8
    "elastic",  # 1 when it may run on fewer or more GPUs than it asked for
    "room",  # GPUs it may still be given, / 8
    "waiting",  # 1 when it held no GPU before this decision
    "service",  # log(1 + GPU-hours it has run) / 4
    "age",  # log(1 + hours since it was submitted) / 4
    "left_known",  # 1 when its remaining work is known (progress reported)
    "left",  # log(1 + estimated remaining GPU-hours) / 4
    "share",  # dominant share: GPUs held before / GPUs in the cluster
    "priority",  # -1 low, 0 normal, 1 high
)
"""The job features after the kind's one-hot part, in column order."""

GLOBAL_FEATURES = (
    "free",  # GPUs still to hand out in this decision / GPUs in the cluster
    "gpus",  # log2(GPUs in the cluster) / 8
    "jobs",  # log(1 + jobs considered) / 6
)

_COL = {name: i for i, name in enumerate(JOB_FEATURES)}
MIN_PROGRESS = 0.02
"""Below this fraction done, remaining work is not estimated (too little to extrapolate)."""


class LayoutError(ValueError):
    """A model whose input layout does not match this code's."""


@dataclass(frozen=True, slots=True)
class Layout:
    """The network's input layout and sizes, stored with the model."""

    kinds: tuple[str, ...]
    hidden: int = 64
    hidden2: int = 32

    @property
    def width(self) -> int:
        """Columns of a job row: one-hot kinds (with the default slot), then the features."""
        return len(self.kinds) + 1 + len(JOB_FEATURES)

    @property
    def globals(self) -> int:
        """Number of global features."""
        return len(GLOBAL_FEATURES)

    def column(self, feature: str) -> int:
        """The column of a named job feature."""
        return len(self.kinds) + 1 + _COL[feature]

    def kind_index(self, kind: str | None) -> int:
        """The one-hot column of a kind (the default slot for one never trained on)."""
        try:
            return self.kinds.index(kind) if kind is not None else len(self.kinds)
        except ValueError:
            return len(self.kinds)

    def to_json(self) -> str:
        """The layout as stored in a model file."""
        return json.dumps(
            {
                "format": FORMAT,
                "kinds": list(self.kinds),
                "job_features": list(JOB_FEATURES),
                "global_features": list(GLOBAL_FEATURES),
                "hidden": self.hidden,
                "hidden2": self.hidden2,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Layout:
        """The layout a model file records; :class:`LayoutError` when this code cannot feed it."""
        try:
            doc = json.loads(text)
            fmt, kinds = doc["format"], doc["kinds"]
            jobs, glob = doc["job_features"], doc["global_features"]
            hidden, hidden2 = int(doc["hidden"]), int(doc["hidden2"])
        except (ValueError, KeyError, TypeError) as exc:
            raise LayoutError(f"model layout unreadable: {exc}") from None
        if fmt != FORMAT:
            raise LayoutError(f"model format {fmt!r}, this gctl-dl2 reads format {FORMAT}")
        if tuple(jobs) != JOB_FEATURES or tuple(glob) != GLOBAL_FEATURES:
            raise LayoutError(
                "model was trained on other input features: "
                f"job {','.join(map(str, jobs))}; global {','.join(map(str, glob))}"
            )
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            raise LayoutError("model layout kinds must be a list of names")
        return cls(tuple(kinds), hidden, hidden2)


def log_scaled(values: np.ndarray, scale: float = 4.0) -> np.ndarray:
    """``log(1 + value) / scale``: heavy-tailed quantities (hours) squeezed into a small range."""
    out: np.ndarray = np.log1p(np.maximum(values, 0.0)) / scale
    return out


def left_estimate(service: np.ndarray, done: np.ndarray) -> np.ndarray:
    """Remaining GPU-seconds from service had and the fraction done (NaN: not estimable).

    Not estimated while a job has done under :data:`MIN_PROGRESS` of its
    work or had no service, nor where the fraction done is unknown (NaN).
    """
    ok = (done >= MIN_PROGRESS) & (service > 0)
    safe = np.where(ok, done, 1.0)
    out: np.ndarray = np.where(ok, service * (1.0 - safe) / safe, np.nan)
    return out


def rows(layout: Layout, n: int) -> np.ndarray:
    """An empty feature matrix for ``n`` jobs."""
    return np.zeros((n, layout.width), dtype=np.float64)
