"""DL2 (the ``dl2`` plugin policy): train on philly, evaluate on unseen jobs, time its inference.

1. **Training**: ``gctl sim train dl2`` on virtual cluster 103959 of
   ``philly.csv`` (1,934 jobs over 91.6 days), its first 60 % of time
   (``--window 0:55d``), on 3x8 GPUs, every job elastic
   (``--elastic-fraction 1``); timed.
2. **Evaluation** on the following 40 % (``--window 55d:92d``, never seen in
   training): dl2 against its teacher (gandiva, with grow and shrink) and
   fifo; then the same model on trace1 (12x8) and trace3 (5x8), every job
   elastic. Targets: dl2's avg JCT at most 0.9 x the teacher's and at least
   40 % under fifo's on the philly evaluation window.
3. **Inference**: one whole reallocation (rows built, guards, the network
   run action by action, counts turned into decisions) with 1,000 jobs on
   64, 256 and 1,024 GPUs; target 5 ms. The network takes one action per
   GPU handed out, so the time grows with the GPUs more than with the jobs.

Run: ``.venv/bin/python bench/dl2.py [--model MODEL | --keep MODEL]`` (with
``--model``, step 1 is skipped; ``--keep`` keeps the model it trains).
Figures come from the simulator's performance model, not GPUs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gctl_dl2.network import Network
from gctl_dl2.policy import Dl2Policy

from gctl.core.decisions import Place
from gctl.core.model import JobSpec, ShareMode
from gctl.core.state import ClusterState
from gctl.sim.cluster_spec import parse_cluster
from gctl.sim.profiles import known_models

ROOT = Path(__file__).resolve().parent.parent
GCTL = Path(sys.executable).with_name("gctl")
PHILLY = ["traces/philly.csv.gz", "--virtual-cluster", "103959", "--cluster", "3x8"]
CASES = {
    "philly 103959, last 40 %": [*PHILLY, "--window", "55d:92d"],
    "trace1 on 12x8": ["traces/philly_models_trace1.csv", "--cluster", "12x8"],
    "trace3 on 5x8": ["traces/philly_models_trace3.csv", "--cluster", "5x8"],
}


def gctl(*args: str) -> str:
    """Run gctl from the repository root; its stdout."""
    done = subprocess.run([str(GCTL), *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"gctl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def train(out: Path) -> float:
    """Train the model the way the README says; wall seconds."""
    started = time.perf_counter()
    gctl(
        "sim",
        "train",
        "dl2",
        *PHILLY,
        "--window",
        "0:55d",
        "--elastic-fraction",
        "1",
        "--out",
        str(out),
        "--json",
    )
    return time.perf_counter() - started


def evaluate(model: Path) -> None:
    """dl2 against gandiva and fifo on each case, as a Markdown table."""
    print(
        "| case | policy | avg JCT (h) | p99 JCT (d) | makespan (d) | avg JCT / gandiva |"
        " avg JCT vs fifo |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, args in CASES.items():
        doc = json.loads(
            gctl(
                "sim",
                "run",
                *args,
                "--elastic-fraction",
                "1",
                "--policy",
                "dl2",
                "-o",
                f"model={model}",
                "--compare",
                "gandiva,fifo",
                "--json",
            )
        )
        by = {r["policy"]: r["metrics"] for r in doc["results"]}
        for policy, m in by.items():
            ratio = m["avg_jct"] / by["gandiva"]["avg_jct"]
            vs_fifo = m["avg_jct"] / by["fifo"]["avg_jct"] - 1
            print(
                f"| {name} | {policy} | {m['avg_jct'] / 3600:.2f} | {m['p99_jct'] / 86400:.2f}"
                f" | {m['makespan'] / 86400:.2f} | {ratio:.3f} | {vs_fifo:+.1%} |"
            )


def _state(cluster: str, jobs: int) -> ClusterState:
    """``jobs`` elastic jobs (1 or 2 GPUs asked, up to 4) of mixed kinds; the first ones run."""
    state = ClusterState(parse_cluster(cluster))
    kinds = known_models()
    for i in range(jobs):
        spec = JobSpec(
            str(i),
            1 + i % 2,
            submit_time=float(i),
            elastic_min=1,
            elastic_max=4,
            profile=kinds[i % len(kinds)],
        )
        state.submit(spec, float(i))
    free = [(name, g) for name in state.nodes for g in range(8)]
    for i in range(jobs):
        need = state.jobs[str(i)].spec.gpus
        if len(free) < need:
            break
        gpus = tuple(sorted(free.pop() for _ in range(need)))
        state.apply(Place(str(i), gpus, ShareMode.EXCLUSIVE, "bench"), 0.0)
    return state


def inference(model: Path, cluster: str, jobs: int = 1000, repeats: int = 20) -> None:
    """Time one whole reallocation (rows, guards, network, decisions) with ``jobs`` jobs."""
    first, steady, decided = [], [], 0
    for _ in range(repeats):
        state = _state(cluster, jobs)
        policy = Dl2Policy(model=str(model))
        now = float(jobs) + 3600.0
        started = time.perf_counter()
        policy.introspect(state, now)
        first.append(time.perf_counter() - started)
        now += policy.interval  # the next interval: reasons already given, moves held
        started = time.perf_counter()
        decided = len(policy.introspect(state, now))
        steady.append(time.perf_counter() - started)
    gpus = parse_cluster(cluster).total_gpus
    print(
        f"inference, {jobs} jobs on {cluster} ({gpus} GPUs): one reallocation"
        f" {statistics.median(steady) * 1e3:.2f} ms median ({max(steady) * 1e3:.2f} max,"
        f" {decided} decisions); the first, telling every waiting job why,"
        f" {statistics.median(first) * 1e3:.2f} ms"
    )


def main() -> None:
    """Train (unless given a model), evaluate, time the inference."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="evaluate this model instead of training one")
    parser.add_argument("--keep", type=Path, help="write the trained model here (and its curves)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            model = args.keep or Path(tmp) / "dl2.npz"
            seconds = train(model)
            print(f"training: {seconds / 60:.1f} min wall on this machine")
        print(f"model: {model} ({Network.load(model).layout.hidden} hidden units)")
        evaluate(model)
        for cluster in ("8x8", "32x8", "128x8"):
            inference(model, cluster)


if __name__ == "__main__":
    main()
