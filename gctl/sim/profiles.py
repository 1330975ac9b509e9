"""Job performance model per trace model name: utilisation, memory, packing, locality, costs.

The trace models (``philly_models_trace*.csv``) are vgg16, vgg19, resnet18,
shufflenet_v2_x1_0, bert, gpt2, dqn and a2c. ``philly.csv`` names no model:
its jobs (model ``None``) and any unknown name get :data:`DEFAULT`. Measured
data comes from ``gctl/sim/data/profiles.json``, which
``tools/build_profiles.py`` generates from two public sources (both recorded,
with hashes, in the JSON):

* **gavel** (stanford-futuredata/gavel ``scheduler/simulation_throughputs.json``,
  MIT): steps/s of 26 job types alone, packed in pairs on one GPU, and spread
  across servers, on K80/P100/V100. Each trace model maps to one gavel job
  type: family by hand (resnet18, shufflenet -> ResNet-18; vgg16, vgg19 ->
  ResNet-50; bert, gpt2 -> Transformer; dqn, a2c -> A3C), batch size by the
  nearest V100 step time to the model's GPU time per iteration in the trace.
  The builder's docstring and each model's ``mapping`` field say why.
* **Muri** (Rivendile/Muri ``simulator/trace-data/``, Apache-2.0): the trace
  files themselves, which carry each model's per-iteration profile: total
  iteration time and the time of its input (storage/CPU), GPU and network
  stages, for 1 to 32 GPUs.

Where the numbers come from
---------------------------
``gpu_util``
    GPU stage / iteration time of the model's 1-GPU jobs in the trace (Muri
    ``resource_time_1 / iteration_time``): vgg16 0.64, vgg19 0.73, resnet18
    0.14 and shufflenet 0.07 (ImageNet input pipelines dominate), bert 0.90,
    gpt2 0.96, a2c 0.03 and dqn 0.02 (environment simulation on the CPU).
``gpu_mem_mb``
    Engineering estimates (not measured here) of the footprint of one training
    process on a 16 GB V100 in fp32 at the trace's batch size: ~600 MB of CUDA
    context and allocator slack, plus weights, gradients and optimiser state
    (see ``checkpoint_mb``), plus saved activations. Image models: ~33 MB per
    224x224 image for ResNet-18, ~15 MB for ShuffleNetV2, ~200 MB for
    VGG16/19. Transformers from the activation formula
    ``s*b*h*(34 + 5*a*s/h)`` bytes per layer (Korthikanti et al. 2022, fp16;
    doubled for fp32) with BERT-base at sequence 512 and GPT-2 small at 1024
    (these lengths reproduce the trace's GPU times of 160 and 410 ms per
    batch of 4 on a V100), plus GPT-2's 50257-word logits. RL: the networks
    are ~1.7 M parameters, so the context dominates. Results (MB): resnet18
    5000, shufflenet 2500, vgg16 5500, vgg19 6000, bert 5500, gpt2 12000,
    dqn 800, a2c 800.
``checkpoint_mb``
    Parameter count x bytes of state per parameter, in MiB: fp32 weights plus
    optimiser state: SGD with momentum 8 B (image models; a2c's RMSprop too),
    Adam 12 B (bert, gpt2), DQN 16 B (online and target network plus Adam).
    Parameters: resnet18 11.69 M, shufflenet 2.28 M, vgg16 138.36 M, vgg19
    143.67 M, bert-base 109.48 M, gpt2 small 124.44 M, dqn and a2c ~1.7 M
    (the Nature Atari CNN). Replay buffers and data-loader state are excluded.
``packed_speeds``
    gavel's pair throughput over each job's solo throughput (V100 unless
    asked), for the models' gavel job types. A pair is not packable when
    gavel never ran it (0.0 in gavel: it did not fit) or when the two
    ``gpu_mem_mb`` exceed the GPU's memory (nvidia-smi totals: V100-16GB
    16160 MiB, P100-16GB 16280, K80 11441 per die). gavel measured only
    1-GPU pairs; the same speeds are applied to multi-GPU jobs packed GPU for
    GPU. A pair with an unknown model gets :data:`DEFAULT_PACKED_SPEED` (0.6)
    each, 1.2 aggregate: inside the -16 %..+46 % aggregate change Gandiva
    measured for "medium" jobs (DESIGN §2.1), a little above its midpoint.
``relative_speed``
    gavel's solo steps/s of the model's job type on a GPU type over its V100
    steps/s (trace durations are ideal times on V100s): resnet18 0.086 on a
    K80 and 0.75 on a P100, gpt2 0.29 and 1.05. A job without a known model
    gets the geometric mean of the eight trace models for the type (K80
    0.21, P100 0.76); a type without data (A100, say) counts as a V100.
``locality``
    Speed multiplier by how far apart the job's GPUs are (the simulator
    divides it by the factor of the tightest set the cluster has for the
    job's size, see :mod:`gctl.sim.perf`). SINGLE and
    SAME_SWITCH are 1.0 (no slowdown; Gandiva's slowdown of two LM jobs on one
    PCIe switch is interference between jobs, not the placement of one).
    Defaults: SAME_SOCKET 0.95, CROSS_SOCKET 0.85, CROSS_NODE 0.7 (the 30 %
    inter-server loss Gandiva reports for InceptionV3). Per family, from
    Gandiva (DESIGN §2.1): heavy-image (VGG) runs at 0.6 across CPU sockets
    (Gandiva measured VGG16); light-image is unaffected by the socket (Gandiva:
    ResNet-50 unaffected; ResNet-18 and ShuffleNet have fewer parameters
    still) and so is rl (1.7 M parameters). CROSS_NODE is gavel's
    unconsolidated / consolidated V100 throughput for the mapped job type,
    geometric mean over its 2-, 4- and 8-GPU figures, capped at 1.0 and at
    the CROSS_SOCKET factor (so the factors never rise with distance); gavel
    has no multi-GPU A3C, so rl falls back to the trace's own ratio of 8-GPU
    (one server) to 16-GPU (two servers) iteration time. Results: vgg16 and
    vgg19 0.6 (capped; gavel's ResNet-50 gives 0.75, the trace's own VGG16
    0.64), resnet18 0.96, shufflenet 0.58, bert 0.49, gpt2 0.75, dqn 0.97,
    a2c 0.98. Gandiva's inter-server losses (up to 47 % ResNet-50, 30 %
    InceptionV3, 5 % DeepSpeech) span the same range.
``migration_cost_s``
    Gandiva: ~1 s for most models, 3.5 s for a 1.4 GB checkpoint. Linear
    through those two points: ``1.0 + 2.5 * checkpoint_mb / 1400``.
``suspend_resume_cost_s``
    Gandiva: ~100 ms, up to ~1 s for large models; suspension happens at the
    memory minimum of a mini-batch, so what moves is about the checkpoint:
    ``0.1 + 0.9 * min(1, checkpoint_mb / 1400)``.
:data:`DEFAULT`
    Rounded medians of the eight trace models (gpu_util 0.39, gpu_mem_mb 5250,
    checkpoint_mb 572) with the default locality factors, so a job without a
    model name behaves like a typical trace job.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib.resources import files
from types import MappingProxyType
from typing import Any

from gctl.core.topology import Spread

DEFAULT_GPU_TYPE = "v100"
"""GPU type whose measurements the model uses unless told otherwise."""

GPU_MEMORY_MB: Mapping[str, int] = MappingProxyType({"k80": 11_441, "p100": 16_280, "v100": 16_160})
"""Usable memory of one GPU (nvidia-smi total), MiB."""

DEFAULT_PACKED_SPEED = 0.6
"""Speed of each job of a packed pair when a model is unknown (1.2 aggregate)."""

DEFAULT_LOCALITY: Mapping[Spread, float] = MappingProxyType(
    {
        Spread.SINGLE: 1.0,
        Spread.SAME_SWITCH: 1.0,
        Spread.SAME_SOCKET: 0.95,
        Spread.CROSS_SOCKET: 0.85,
        Spread.CROSS_NODE: 0.7,
    }
)
"""Locality factors of a job of unknown sensitivity."""

MIGRATION_BASE_S = 1.0
MIGRATION_REF_S = 3.5
MIGRATION_REF_MB = 1400.0
SUSPEND_MIN_S = 0.1
SUSPEND_MAX_S = 1.0

# Footprint on a 16 GB V100 (MB) and checkpoint state: (parameters in
# millions, bytes per parameter). See the module docstring.
_GPU_MEM_MB = {
    "resnet18": 5000,
    "shufflenet_v2_x1_0": 2500,
    "vgg16": 5500,
    "vgg19": 6000,
    "bert": 5500,
    "gpt2": 12000,
    "dqn": 800,
    "a2c": 800,
}
_CHECKPOINT_STATE = {
    "resnet18": (11.69, 8),
    "shufflenet_v2_x1_0": (2.28, 8),
    "vgg16": (138.36, 8),
    "vgg19": (143.67, 8),
    "bert": (109.48, 12),
    "gpt2": (124.44, 12),
    "dqn": (1.7, 16),
    "a2c": (1.7, 8),
}
# In-node factors (SAME_SWITCH, SAME_SOCKET, CROSS_SOCKET) per family.
_IN_NODE = {
    "heavy-image": (1.0, 0.95, 0.6),
    "light-image": (1.0, 1.0, 1.0),
    "transformer": (1.0, 0.95, 0.85),
    "rl": (1.0, 1.0, 1.0),
}


@dataclass(frozen=True)
class ModelProfile:
    """Performance traits of one model's training job.

    ``gpu_util`` is the utilisation (0..1) the job shows alone; ``gpu_mem_mb``
    its footprint on one 16 GB V100; ``checkpoint_mb`` the state a suspend or
    migration moves; ``locality`` the speed multiplier (1.0 = no slowdown) for
    each :class:`~gctl.core.topology.Spread` of its GPUs.
    """

    name: str
    family: str
    gpu_util: float
    gpu_mem_mb: int
    checkpoint_mb: float
    locality: Mapping[Spread, float] = field(hash=False)


DEFAULT = ModelProfile(
    name="default",
    family="default",
    gpu_util=0.39,
    gpu_mem_mb=5250,
    checkpoint_mb=572.0,
    locality=DEFAULT_LOCALITY,
)
"""Profile of a job whose model is unknown (all of ``philly.csv``)."""


@cache
def _doc() -> dict[str, Any]:
    """The packaged profiles JSON, read once."""
    text = files("gctl.sim").joinpath("data", "profiles.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _cross_node(entry: dict[str, Any], cross_socket: float) -> float:
    """CROSS_NODE factor of a model from its JSON entry (see the module docstring)."""
    ratios = [float(r) for r in entry["cross_node_ratio"][DEFAULT_GPU_TYPE].values()]
    if ratios:
        factor = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    else:
        times = entry["muri"]["iteration_time_ms"]
        if "8" in times and "16" in times:
            factor = float(times["8"]) / float(times["16"])
        else:
            factor = DEFAULT_LOCALITY[Spread.CROSS_NODE]
    return round(min(factor, 1.0, cross_socket), 3)


def _build(name: str, entry: dict[str, Any]) -> ModelProfile:
    """Profile of one trace model from its JSON entry and the tables above."""
    family = str(entry["family"])
    muri = entry["muri"]
    util = float(muri["gpu_time_ms"]) / float(muri["iteration_time_ms"]["1"])
    same_switch, same_socket, cross_socket = _IN_NODE[family]
    params_m, state_bytes = _CHECKPOINT_STATE[name]
    locality = {
        Spread.SINGLE: 1.0,
        Spread.SAME_SWITCH: same_switch,
        Spread.SAME_SOCKET: same_socket,
        Spread.CROSS_SOCKET: cross_socket,
        Spread.CROSS_NODE: _cross_node(entry, cross_socket),
    }
    return ModelProfile(
        name=name,
        family=family,
        gpu_util=round(min(util, 1.0), 3),
        gpu_mem_mb=_GPU_MEM_MB[name],
        checkpoint_mb=round(params_m * 1e6 * state_bytes / 2**20, 1),
        locality=MappingProxyType(locality),
    )


@cache
def _profiles() -> Mapping[str, ModelProfile]:
    """Every trace model's profile, built once."""
    models: dict[str, Any] = _doc()["models"]
    return MappingProxyType({name: _build(name, entry) for name, entry in models.items()})


def _known(model: str | None) -> str | None:
    """Canonical trace model name for ``model``, or None when it is not one."""
    if model is None:
        return None
    name = model.strip().lower()
    return name if name in _profiles() else None


def known_models() -> tuple[str, ...]:
    """Names of the models with a measured profile, sorted."""
    return tuple(sorted(_profiles()))


def profile_for(model: str | None) -> ModelProfile:
    """Profile of ``model`` (case-insensitive); :data:`DEFAULT` when None or unknown."""
    name = _known(model)
    return DEFAULT if name is None else _profiles()[name]


@cache
def packed_speeds(
    a: str | None, b: str | None, *, gpu_type: str = DEFAULT_GPU_TYPE
) -> tuple[float, float] | None:
    """Speeds of ``a`` and ``b``, each relative to running alone, when packed on the same GPUs.

    None when the pair cannot be packed: their memory does not fit one GPU of
    ``gpu_type``, or gavel never ran the pair. A pair with an unknown model
    gets :data:`DEFAULT_PACKED_SPEED` each. Symmetric: swapping ``a`` and
    ``b`` swaps the result. Raises ValueError for a GPU type without data.
    """
    if gpu_type not in GPU_MEMORY_MB or gpu_type not in _doc()["pairs"]:
        raise ValueError(f"no packing data for GPU type {gpu_type!r}")
    if profile_for(a).gpu_mem_mb + profile_for(b).gpu_mem_mb > GPU_MEMORY_MB[gpu_type]:
        return None
    ka, kb = _known(a), _known(b)
    if ka is None or kb is None:
        return (DEFAULT_PACKED_SPEED, DEFAULT_PACKED_SPEED)
    pair = _doc()["pairs"][gpu_type][ka][kb]
    if pair is None:
        return None
    return (float(pair[0]), float(pair[1]))


@cache
def data_gpu_type(gpu_type: str) -> str | None:
    """The data's key (``k80``, ``p100``, ``v100``) for a GPU type name; None if it has no data.

    Names are matched case-insensitively, so ``"K80"`` from a cluster spec
    reads the ``k80`` measurements.
    """
    key = gpu_type.strip().lower()
    return key if key in GPU_MEMORY_MB else None


@cache
def _solo_ratio(model: str, key: str) -> float:
    """Solo steps/s of a known ``model`` on the GPU type ``key`` over its V100 steps/s."""
    solo = _doc()["models"][model]["solo_steps_per_s"]
    return float(solo[key]) / float(solo[DEFAULT_GPU_TYPE])


@cache
def _mean_ratio(key: str) -> float:
    """Geometric mean of :func:`_solo_ratio` over the trace models for the GPU type ``key``."""
    names = known_models()
    return math.exp(sum(math.log(_solo_ratio(m, key)) for m in names) / len(names))


@lru_cache(maxsize=4096)
def relative_speed(model: str | None, gpu_type: str) -> float:
    """How fast ``model`` trains on one GPU of ``gpu_type`` relative to one V100 (1.0).

    gavel's solo steps/s of the model on that type over its V100 steps/s, as
    trace durations are ideal run times on V100s. A model that is None or
    unknown gets the geometric mean over the trace models for the type. The
    type name is matched case-insensitively (``"K80"``, ``"p100"``); a type
    without data (an A100, say) counts as a V100: 1.0.
    """
    key = data_gpu_type(gpu_type)
    if key is None:
        return 1.0
    name = _known(model)
    return _mean_ratio(key) if name is None else _solo_ratio(name, key)


def locality_factor(model: str | None, spread: Spread) -> float:
    """Speed multiplier of ``model`` when its GPUs are ``spread`` apart (1.0 = no slowdown)."""
    return profile_for(model).locality[spread]


def migration_cost_s(model: str | None) -> float:
    """Seconds a migration (checkpoint, move, restore) of ``model`` costs."""
    ckpt = profile_for(model).checkpoint_mb
    return MIGRATION_BASE_S + (MIGRATION_REF_S - MIGRATION_BASE_S) * ckpt / MIGRATION_REF_MB


def suspend_resume_cost_s(model: str | None) -> float:
    """Seconds one suspend plus resume of ``model`` costs."""
    ckpt = profile_for(model).checkpoint_mb
    return SUSPEND_MIN_S + (SUSPEND_MAX_S - SUSPEND_MIN_S) * min(1.0, ckpt / MIGRATION_REF_MB)
