"""Heterogeneous GPUs in the simulator: type speeds, stragglers, batch balancing, pair tables."""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gctl.cli.main import app
from gctl.core.decisions import Place
from gctl.core.model import Cluster, JobSpec, Node, ShareMode
from gctl.core.policies.fifo import FifoPolicy
from gctl.core.policies.gandiva import GandivaPolicy
from gctl.core.state import ClusterState
from gctl.sim import perf, profiles
from gctl.sim.cluster_spec import node_gpus, parse_cluster
from gctl.sim.engine import Simulator
from gctl.sim.perf import PerfConfig
from gctl.sim.workload import TraceJob

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "bench" / "clusters" / "mixed.toml"


def _cluster(*types: str) -> Cluster:
    """One 1-GPU node per type, named n0, n1, ..., each with its type's measured memory."""
    return Cluster(
        tuple(
            Node(f"n{i}", node_gpus(1, gpu_type=t, memory_mb=_memory(t)))
            for i, t in enumerate(types)
        )
    )


def _memory(gpu_type: str) -> int:
    key = profiles.data_gpu_type(gpu_type)
    return profiles.GPU_MEMORY_MB[key] if key is not None else 16_384


def _packed(gpu_type: str, a: str, b: str, gpus: int = 1) -> tuple[float, float]:
    """Speeds of jobs of models ``a`` and ``b`` packed on the first ``gpus`` 1-GPU nodes."""
    state = ClusterState(_cluster(*[gpu_type] * gpus))
    key = tuple((f"n{i}", 0) for i in range(gpus))
    state.submit(JobSpec("a", gpus, profile=a), 0.0)
    state.submit(JobSpec("b", gpus, profile=b), 0.0)
    state.apply(Place("a", key, ShareMode.EXCLUSIVE, "test"), 0.0)
    state.apply(Place("b", key, ShareMode.PACKED, "test"), 0.0)
    return _speed(state, "a"), _speed(state, "b")


def _speed(state: ClusterState, job_id: str, cfg: PerfConfig | None = None) -> float:
    js = state.jobs[job_id]
    prof = profiles.profile_for(js.spec.profile)
    return perf.speed(state, js, prof, cfg or PerfConfig())


def _jobs(spec: list[tuple[float, int, float, str]]) -> list[TraceJob]:
    return [
        TraceJob(JobSpec(f"j{i}", gpus, submit_time=t, profile=model), duration)
        for i, (t, gpus, duration, model) in enumerate(spec)
    ]


# ---- relative speeds --------------------------------------------------------


@pytest.mark.parametrize("model", profiles.known_models())
def test_every_known_model_is_slower_on_a_k80_than_on_a_v100(model: str) -> None:
    assert 0.0 < profiles.relative_speed(model, "K80") < 1.0
    assert profiles.relative_speed(model, "V100") == 1.0


def test_relative_speed_is_the_solo_throughput_ratio_and_ignores_case() -> None:
    # gavel: ResNet-18 10.3003 steps/s on a V100, 0.8856 on a K80, 7.7228 on a P100.
    assert profiles.relative_speed("resnet18", "K80") == pytest.approx(0.8856 / 10.3003)
    assert profiles.relative_speed("ResNet18", "p100") == profiles.relative_speed(
        "resnet18", "P100"
    )
    # gpt2's gavel job type is a little faster on a P100 than on a V100.
    assert profiles.relative_speed("gpt2", "P100") > 1.0


@pytest.mark.parametrize("model", [None, "no-such-model"])
@pytest.mark.parametrize("gpu_type", ["K80", "P100"])
def test_unknown_model_gets_the_geometric_mean_of_the_known_ones(
    model: str | None, gpu_type: str
) -> None:
    known = [profiles.relative_speed(m, gpu_type) for m in profiles.known_models()]
    assert len(known) == 8
    mean = math.exp(sum(math.log(r) for r in known) / len(known))
    assert profiles.relative_speed(model, gpu_type) == pytest.approx(mean, rel=1e-12)
    assert min(known) < mean < max(known)


@pytest.mark.parametrize("model", [None, "bert", "dqn"])
def test_a_type_without_data_counts_as_a_v100(model: str | None) -> None:
    assert profiles.data_gpu_type("A100") is None
    assert profiles.data_gpu_type(" K80 ") == "k80"
    assert profiles.relative_speed(model, "A100") == 1.0


# ---- stragglers and balancing ----------------------------------------------


@pytest.mark.parametrize("balance", [False, True])
def test_a_job_over_a_k80_and_a_v100_runs_at_the_min_or_the_mean(balance: bool) -> None:
    """Equal split: the K80 straggler sets the pace; balanced: the mean of both speeds."""
    r = profiles.relative_speed("resnet18", "K80")
    expected = (r + 1.0) / 2 if balance else r
    jobs = _jobs([(0.0, 2, 100.0, "resnet18")])
    # 1-GPU nodes: the tightest 2-GPU set spans nodes, so locality costs nothing.
    sim = Simulator(_cluster("K80", "V100"), FifoPolicy(), PerfConfig(balance=balance))
    result = sim.run(jobs)
    assert result.metrics.finished == 1
    assert result.metrics.avg_jct == pytest.approx(100.0 / expected)


def test_balancing_weights_the_mean_by_gpus_per_type() -> None:
    state = ClusterState(_cluster("K80", "V100", "V100", "P100"))
    key = (("n0", 0), ("n1", 0), ("n2", 0), ("n3", 0))
    state.submit(JobSpec("j", 4, profile="bert"), 0.0)
    state.apply(Place("j", key, ShareMode.EXCLUSIVE, "test"), 0.0)
    k80, p100 = (profiles.relative_speed("bert", t) for t in ("K80", "P100"))
    cfg = PerfConfig(locality=False)
    assert _speed(state, "j", cfg) == pytest.approx((k80 + 2.0 + p100) / 4)
    assert _speed(state, "j", replace(cfg, balance=False)) == k80
    assert _speed(state, "j", replace(cfg, gpu_types=False)) == 1.0
    assert _speed(state, "j", PerfConfig.plain()) == 1.0


def test_a_job_on_one_slower_type_runs_at_its_speed_either_way() -> None:
    for balance in (False, True):
        sim = Simulator(parse_cluster("1x2:K80-12GB"), FifoPolicy(), PerfConfig(balance=balance))
        result = sim.run(_jobs([(0.0, 2, 100.0, "vgg16")]))
        r = profiles.relative_speed("vgg16", "K80")
        assert result.metrics.avg_jct == pytest.approx(100.0 / r)


def _workload() -> list[TraceJob]:
    models = ["vgg16", "bert", "dqn", "resnet18", "gpt2", "shufflenet_v2_x1_0"]
    return _jobs(
        [(i * 37.0, [1, 1, 2, 4, 1, 8, 2][i % 7], 400.0 + 29 * i, models[i % 6]) for i in range(60)]
    )


@pytest.mark.parametrize("cluster", ["2x4", "2x4:A100-16GB"])
def test_on_v100s_or_types_without_data_gpu_types_and_the_split_change_nothing(
    cluster: str,
) -> None:
    jobs = _workload()
    base = Simulator(parse_cluster("2x4"), GandivaPolicy(), PerfConfig(gpu_types=False))
    ref = base.run(jobs)
    assert ref.metrics.counts["packs"] > 0  # packed speeds are in play
    for cfg in (PerfConfig(), PerfConfig(balance=False)):
        sim = Simulator(parse_cluster(cluster), GandivaPolicy(), cfg)
        assert sim.run(jobs).metrics == ref.metrics
        assert sim.records == base.records


def test_on_a_mixed_cluster_the_split_and_the_types_matter() -> None:
    jobs = _workload()  # its 8-GPU jobs take both nodes: a K80 and a V100 one
    cluster = Cluster(
        tuple(Node(t, node_gpus(4, gpu_type=t, memory_mb=_memory(t))) for t in ("K80", "V100"))
    )
    avg = {
        name: Simulator(cluster, GandivaPolicy(), cfg).run(jobs).metrics.avg_jct
        for name, cfg in (
            ("balanced", PerfConfig()),
            ("equal", PerfConfig(balance=False)),
            ("v100s", PerfConfig(gpu_types=False)),
        )
    }
    assert avg["v100s"] < avg["balanced"] < avg["equal"]


# ---- pair tables by GPU type -----------------------------------------------


def test_a_pair_packed_on_a_k80_uses_the_k80_pair_table() -> None:
    k80 = profiles.packed_speeds("resnet18", "a2c", gpu_type="k80")
    v100 = profiles.packed_speeds("resnet18", "a2c", gpu_type="v100")
    assert k80 is not None and v100 is not None and k80 != v100
    a, b = _packed("K80", "resnet18", "a2c")
    assert a == pytest.approx(profiles.relative_speed("resnet18", "K80") * k80[0])
    assert b == pytest.approx(profiles.relative_speed("a2c", "K80") * k80[1])
    assert _packed("V100", "resnet18", "a2c") == v100


def test_a_pair_that_fits_a_v100_but_not_a_k80_takes_turns_there() -> None:
    # gpt2 (12,000 MB) and dqn (800 MB) fit 16,160 MiB but not a K80 die's 11,441.
    v100 = profiles.packed_speeds("gpt2", "dqn")
    assert v100 is not None and v100 != (0.5, 0.5)
    assert profiles.packed_speeds("gpt2", "dqn", gpu_type="k80") is None
    assert _packed("V100", "gpt2", "dqn") == v100
    a, b = _packed("K80", "gpt2", "dqn")
    assert a == pytest.approx(profiles.relative_speed("gpt2", "K80") / 2)
    assert b == pytest.approx(profiles.relative_speed("dqn", "K80") / 2)


def test_a_pair_on_a_type_without_data_packs_as_on_a_v100() -> None:
    assert _packed("A100", "resnet18", "a2c") == profiles.packed_speeds("resnet18", "a2c")


def test_a_packed_pair_over_mixed_types_uses_each_gpus_table() -> None:
    state = ClusterState(_cluster("K80", "V100"))
    key = (("n0", 0), ("n1", 0))
    for job_id, model in (("a", "resnet18"), ("b", "a2c")):
        state.submit(JobSpec(job_id, 2, profile=model), 0.0)
    state.apply(Place("a", key, ShareMode.EXCLUSIVE, "test"), 0.0)
    state.apply(Place("b", key, ShareMode.PACKED, "test"), 0.0)
    k80 = profiles.packed_speeds("resnet18", "a2c", gpu_type="k80")
    v100 = profiles.packed_speeds("resnet18", "a2c")
    assert k80 is not None and v100 is not None
    on_k80 = profiles.relative_speed("resnet18", "K80") * k80[0]
    assert _speed(state, "a") == pytest.approx((on_k80 + v100[0]) / 2)
    assert _speed(state, "a", PerfConfig(balance=False)) == pytest.approx(on_k80)


# ---- the CLI and the bundled cluster --------------------------------------


def test_the_mixed_cluster_is_the_documented_one() -> None:
    cluster = parse_cluster(str(MIXED))
    types = [(g.type, g.memory_mb) for n in cluster.nodes for g in n.gpus]
    assert types == [("K80", 11_441)] * 16 + [("P100", 16_280)] * 16 + [("V100", 16_160)] * 32
    for gpu_type, memory in set(types):
        assert profiles.GPU_MEMORY_MB[gpu_type.lower()] == memory


def test_sim_run_equal_split_slows_jobs_on_the_mixed_cluster() -> None:
    trace = ROOT / "traces" / "philly_models_trace3.csv"
    args = ["sim", "run", str(trace), "--cluster", str(MIXED), "--limit", "150", "--compare", ""]

    def avg_jct(*extra: str) -> float:
        out = CliRunner().invoke(app, [*args, *extra, "--json"])
        assert out.exit_code == 0, out.output
        return float(json.loads(out.stdout)["results"][0]["metrics"]["avg_jct"])

    balanced, equal, v100s = avg_jct(), avg_jct("--equal-split"), avg_jct("--no-gpu-types")
    assert avg_jct("--balance-batch") == balanced
    assert v100s < balanced < equal


def test_a_slower_gpu_is_busier_with_the_same_job() -> None:
    """Utilisation a job shows: its GPU stage stretches on a slower GPU, the rest does not."""
    assert perf.busy_util(0.5, 1.0) == 0.5
    assert perf.busy_util(0.5, 0.5) == pytest.approx(2 / 3)  # 1 s of GPU per 0.5 s of input
    assert perf.busy_util(0.1, 0.213) > 0.3
    assert perf.busy_util(0.0, 0.2) == 0.0


def test_the_test_images_emulated_speeds_are_the_simulators() -> None:
    """train.py cannot import the simulator, so it carries a copy of the mean speeds: the same."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "testimage" / "train.py"
    spec = importlib.util.spec_from_file_location("test_image_train", path)
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    for gpu_type, speed in train.EMULATED_SPEED.items():
        assert speed == round(profiles.relative_speed(None, gpu_type), 3), gpu_type
