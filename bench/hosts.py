"""Hosts layer latency on the local test hosts (real sshd + dockerd, emulated GPUs).

- Container start: from ``Engine.start`` to the container reported running
  (create + start through the pooled SSH connection), p50 and p95 over
  ``--starts`` containers (target: p50 at most 1 s).
- Pause and unpause of a running container through docker-py over the pooled
  channel (target: at most 100 ms each), next to the same operation done the
  other way the issue allows: the ``docker`` CLI run over the same SSH
  connection.
- ``gctl node probe`` work for 8 hosts: all at once (fan-out) against one by
  one, on fresh connections each round as a CLI run has.

Starts the test hosts with ``scripts/testhosts.sh start 8`` and stops them at
the end. Run as root: ``.venv/bin/python bench/hosts.py [--starts 20]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "hosts"), str(REPO / "tests" / "support")]

import testhosts  # noqa: E402

from gctl.hosts.engine import ContainerSpec, Engine  # noqa: E402
from gctl.hosts.ssh import Pool, Target  # noqa: E402
from gctl.services import db, nodes, probe  # noqa: E402


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _target(info: dict[str, Any], h: dict[str, Any]) -> Target:
    return Target(h["name"], h["host"], h["port"], h["user"], info["key"], h["fingerprint"])


def _starts(engine: Engine, work: str, count: int) -> list[float]:
    took = []
    for i in range(count):
        spec = ContainerSpec(
            job_id=1000 + i,
            attempt=0,
            node=engine.node,
            image="gctl-test/train:1",
            command=("python3", "/opt/gctl/train.py", "--steps", "100000", "--step-time", "0.1"),
            gpu_indices=(0,),
            gpu_uuids=("GPU-emulated-0",),
            job_dir=f"{work}/jobs/{1000 + i}",
            emulated=True,
        )
        start = time.perf_counter()
        cid = engine.start(spec)
        while not engine.state(cid).running:
            time.sleep(0.005)
        took.append(time.perf_counter() - start)
        engine.remove(cid)
    return took


def _pause_cycle(engine: Engine, pool: Pool, cid: str, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {
        "api pause": [],
        "api unpause": [],
        "cli pause": [],
        "cli unpause": [],
    }
    for _ in range(rounds):
        for op in ("pause", "unpause"):
            start = time.perf_counter()
            getattr(engine, op)(cid)
            out[f"api {op}"].append(time.perf_counter() - start)
        for op in ("pause", "unpause"):
            start = time.perf_counter()
            res = pool.run(engine.target, ["docker", op, cid])
            out[f"cli {op}"].append(time.perf_counter() - start)
            assert res.rc == 0, res.stderr
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    info = testhosts.start(8)
    try:
        hosts = info["hosts"]
        with Pool() as pool:
            h1 = hosts[0]
            engine = Engine(pool, _target(info, h1))
            engine.info()  # connection and API version once, as a daemon would have
            starts = _starts(engine, h1["work_dir"], args.starts)
            print(
                f"container start to running: p50 {_ms(starts, 0.5):.0f} ms,"
                f" p95 {_ms(starts, 0.95):.0f} ms ({len(starts)} starts)"
            )
            spec = ContainerSpec(
                job_id=999, attempt=0, node=h1["name"], image="gctl-test/train:1",
                command=("python3", "/opt/gctl/train.py", "--steps", "1000000"),
                gpu_indices=(0,), gpu_uuids=("GPU-emulated-0",),
                job_dir=f"{h1['work_dir']}/jobs/999", emulated=True,
            )  # fmt: skip
            cid = engine.start(spec)
            for name, values in _pause_cycle(engine, pool, cid, args.rounds).items():
                print(f"{name}: p50 {_ms(values, 0.5):.1f} ms, max {1000 * max(values):.1f} ms")
            engine.remove(cid)
            engine.close()

        with tempfile.TemporaryDirectory() as tmp:
            store = db.connect(str(Path(tmp) / "gctl.db"))
            db.upgrade(store)
            for h in hosts:
                nodes.add_node(
                    store, h["name"], h["host"], port=h["port"], ssh_user=h["user"],
                    key_path=info["key"], emulate_gpus="4xV100-16GB",
                    host_key_fingerprint=h["fingerprint"], work_dir=h["work_dir"],
                )  # fmt: skip
            together = []
            apart = []
            for _ in range(3):
                start = time.perf_counter()
                views = probe.probe(store)
                together.append(time.perf_counter() - start)
                assert all(v.responding for v in views), [v.error for v in views]
                start = time.perf_counter()
                for h in hosts:
                    probe.probe(store, [h["name"]])
                apart.append(time.perf_counter() - start)
            print(
                f"probe 8 hosts: concurrently {statistics.median(together):.2f} s,"
                f" one by one {statistics.median(apart):.2f} s (median of 3)"
            )
    finally:
        testhosts.stop()


if __name__ == "__main__":
    main()
