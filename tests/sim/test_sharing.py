"""Opportunistic jobs in the simulator: the TGS sharing model, eviction and the per-class report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gctl.cli.main import app
from gctl.core.model import JobClass, JobSpec
from gctl.core.opportunistic import Sharing
from gctl.core.policies.fifo import FifoPolicy
from gctl.core.tgs import RateControl
from gctl.sim import profiles
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.engine import Simulator
from gctl.sim.perf import PerfConfig
from gctl.sim.sharing import shared
from gctl.sim.workload import TraceJob

ROOT = Path(__file__).resolve().parents[2]


def _job(job_id: str, gpus: int, at: float, duration: float, model: str, opp: bool) -> TraceJob:
    cls = JobClass.OPPORTUNISTIC if opp else JobClass.PRODUCTION
    mem = profiles.profile_for(model).gpu_mem_mb if opp else None
    spec = JobSpec(job_id, gpus, submit_time=at, job_class=cls, profile=model, gpu_mem_mb=mem)
    return TraceJob(spec, duration)


@pytest.mark.parametrize("epsilon", [0.02, 0.05, 0.1])
def test_the_controller_keeps_production_within_its_budget_and_gives_the_guest_the_rest(
    epsilon: float,
) -> None:
    control = RateControl(epsilon=epsilon)
    for host in profiles.known_models():
        for guest in profiles.known_models():
            pa, pb = profiles.packed_speeds(host, guest) or (0.6, 0.6)
            both = shared(host, guest, control)
            assert 1 - epsilon - 0.01 <= both.production <= 1.0, (host, guest)
            assert both.guest == pytest.approx(both.beta * pb)
            best = min(1.0, epsilon / (1 - pa)) if pa < 1 else 1.0  # the most beta on target
            assert 0.6 * best <= both.beta <= best + 0.01, (host, guest, both.beta, best)


def test_a_guest_beside_a_light_production_job_shares_its_gpu_under_control() -> None:
    jobs = [
        _job("p", 1, 0.0, 10_000.0, "resnet18", opp=False),
        _job("g", 1, 0.0, 500.0, "a2c", opp=True),
    ]
    sim = Simulator(parse_cluster("1x1"), FifoPolicy(), PerfConfig.plain())
    result = sim.run(jobs)
    assert not result.unfinished
    ends = {r.job_id: r for r in sim.records}
    both = shared("resnet18", "a2c", RateControl())
    assert 0 < both.beta < 1
    # The guest ran beside p from the start at both.guest, then alone at full speed.
    assert ends["g"].first_run == 0.0 and ends["g"].finish is not None
    assert ends["g"].finish < 10_000 / both.production
    # p did (1 - production speed) less work a second while g ran beside it.
    lost = (1 - both.production) * ends["g"].finish
    assert ends["p"].jct == pytest.approx(10_000.0 + lost, rel=1e-9)
    assert result.classes["production"].finished == 1
    assert result.classes["opportunistic"].finished == 1


def test_production_evicts_a_guest_from_idle_gpus_and_the_guest_resumes_later() -> None:
    jobs = [
        _job("g", 4, 0.0, 1_000.0, "vgg16", opp=True),
        _job("p", 4, 100.0, 1_000.0, "vgg16", opp=False),
    ]
    sim = Simulator(
        parse_cluster("1x4"), FifoPolicy(), PerfConfig.plain(), sharing=Sharing(colocate=False)
    )
    result = sim.run(jobs)
    ends = {r.job_id: r for r in sim.records}
    assert ends["p"].first_run == 100.0 and ends["p"].jct == pytest.approx(1_000.0)
    assert ends["g"].moves == 1  # one eviction (requeue), progress kept in the plain model
    assert ends["g"].finish == pytest.approx(2_000.0)
    assert result.metrics.gpu_utilisation == pytest.approx(1.0)


def test_sim_run_reports_times_by_job_class() -> None:
    trace = ROOT / "traces" / "philly_models_trace3.csv"
    args = ["sim", "run", str(trace), "--cluster", "2x8", "--limit", "120", "--compare", "fifo"]
    out = CliRunner().invoke(app, [*args, "--opportunistic-fraction", "0.3", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    for result in doc["results"]:
        classes = result["classes"]
        assert set(classes) == {"opportunistic", "production"}
        jobs = result["metrics"]["jobs"]
        assert classes["opportunistic"]["jobs"] + classes["production"]["jobs"] == jobs > 100
        assert classes["opportunistic"]["finished"] == classes["opportunistic"]["jobs"]
    table = CliRunner().invoke(app, [*args, "--opportunistic-fraction", "0.3"])
    assert table.exit_code == 0 and "by job class" in table.stdout
    plain = CliRunner().invoke(app, [*args, "--json"])
    assert json.loads(plain.stdout)["results"][0]["classes"] == {}
