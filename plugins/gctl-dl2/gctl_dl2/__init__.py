"""DL2 for gctl: a deep-RL policy that learns how many GPUs each job holds.

The policy (:mod:`gctl_dl2.policy`, registered as ``dl2``) runs a small
numpy network (:mod:`gctl_dl2.network`) over per-job features
(:mod:`gctl_dl2.features`); the trainer (:mod:`gctl_dl2.training`,
``gctl sim train dl2``) teaches it in gctl's simulator.
"""
