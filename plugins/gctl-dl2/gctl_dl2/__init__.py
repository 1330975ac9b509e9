"""DL2 for gctl: a deep-RL policy that learns how many GPUs each job holds.

The policy (:mod:`gctl_dl2.policy`, registered as ``dl2``) runs a small
numpy network (:mod:`gctl_dl2.network`) over per-job features
(:mod:`gctl_dl2.features`); the trainer (:mod:`gctl_dl2.training`,
``gctl sim train dl2``) teaches it in gctl's simulator.
"""

import os

# The network's matrices are small: handing them to BLAS threads costs more than it
# saves, and far more when the cores are busy (measured: a 1,000-row layer takes 0.1 ms
# on one thread, up to 3.4 ms on two beside a busy process). Unless the user chose a
# thread count, numpy (imported after this, by the modules below) uses one.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
