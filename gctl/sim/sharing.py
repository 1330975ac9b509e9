"""The simulator's TGS sharing model: how fast a production job and its guest run together.

gctl's actuator duty-cycles the opportunistic job (its container's freezer)
with on-fraction beta. While it is on, both jobs run at the speeds Gavel
measured for the pair packed on one GPU (``pa`` for production, ``pb`` for
the guest, each relative to running alone,
:func:`gctl.sim.profiles.packed_speeds`); while it is off, production runs
alone. So, relative to running alone::

    production(beta) = 1 - beta * (1 - pa)
    guest(beta)      = beta * pb

beta is where the daemon's own controller (:class:`gctl.core.tgs.RateControl`)
settles when fed that production speed as its rate samples: the model runs
the controller step by step and takes the mean beta of its last steps, so
AIMD's oscillation below the tipping point is paid as it would be on a
host. The few control steps before it settles (profiling, slow start:
seconds on a host) are not modelled; trace jobs run for hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gctl.core.tgs import RateControl
from gctl.sim import profiles

SETTLE_STEPS = 512
"""Control steps run before beta is read off."""
MEAN_OF = 128
"""The last steps whose mean beta is the steady state."""


@dataclass(frozen=True, slots=True)
class Shared:
    """A production job and its guest in steady state: beta and both speeds (1.0 = alone)."""

    beta: float
    production: float
    guest: float


@lru_cache(maxsize=4096)
def shared(production: str | None, guest: str | None, control: RateControl) -> Shared:
    """The steady state of ``guest`` (a model name) beside ``production`` under ``control``."""
    pair = profiles.packed_speeds(production, guest) or (
        profiles.DEFAULT_PACKED_SPEED,
        profiles.DEFAULT_PACKED_SPEED,
    )
    pa, pb = pair
    loss = max(1.0 - pa, 0.0)
    state = control.start()
    betas: list[float] = []
    for _ in range(SETTLE_STEPS):
        betas.append(state.beta)
        state = control.step(state, 1.0 - state.beta * loss)
    beta = sum(betas[-MEAN_OF:]) / MEAN_OF
    return Shared(beta, 1.0 - beta * loss, beta * pb)
