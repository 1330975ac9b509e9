"""Settings for the whole suite: Hypothesis tries the same examples on every run.

Derandomized (examples drawn from a seed derived from each test, no example
database), a run's result does not depend on chance or on what an earlier
run on the same checkout found: CI on a fresh machine tests what a developer
tested. To draw fresh examples (and keep the failing ones), run with
``--hypothesis-profile=explore``.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("repeatable")
