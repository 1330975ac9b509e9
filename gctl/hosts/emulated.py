"""Emulated GPUs' contract with the jobs on them: declared utilisation and the shared GPU files.

Emulated GPUs (``--emulate-gpus``) run no kernels, so what NVML would
measure on a real GPU is declared or emulated instead, and every figure
derived from it is marked emulated:

- a job's utilisation is what its ``GCTL_EMULATED_UTIL`` env value declares
  (percent of one GPU, default 100);
- each node has a directory of emulated-GPU files, mounted into every
  container on its emulated GPUs (``GCTL_EMULATED_GPU_DIR``), in which a
  job's compute can reserve GPU time so that jobs sharing a GPU contend for
  it (the test image's training program does: ``--gpu-busy``).
"""

from __future__ import annotations

EMULATED_UTIL_ENV = "GCTL_EMULATED_UTIL"
"""A job's env key declaring the utilisation (percent of one GPU) it shows on emulated GPUs."""
EMULATED_GPU_MEM_ENV = "GCTL_EMULATED_GPU_MEM"
"""A job's env key declaring the memory (MiB) it allocates on each of its emulated GPUs."""
GPU_DIR_ENV = "GCTL_EMULATED_GPU_DIR"
"""The env key telling a job where its node's emulated-GPU files are."""
GPU_DIR_IN_CONTAINER = "/run/gctl/emulated-gpus"
"""Where a node's emulated-GPU directory appears inside a container on emulated GPUs."""


def declared_util(text: str) -> float:
    """``GCTL_EMULATED_UTIL``'s value as a percent; ValueError unless a number in 0..100."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 100.0:
        raise ValueError(f"{EMULATED_UTIL_ENV}={text!r}: expected a percentage from 0 to 100")
    return value


def declared_gpu_mem(text: str) -> int:
    """``GCTL_EMULATED_GPU_MEM``'s value in MiB; ValueError unless a whole number from 0."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{EMULATED_GPU_MEM_ENV}={text!r}: expected a whole number of MiB")
    return int(text)
