"""Datasets in the simulator: the catalogue, the assignment, node caches and the copy wait."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from gctl.hosts import cache_agent
from gctl.sim import datasets as ds
from gctl.sim.runner import SimRequest, run

TRACE = Path(__file__).resolve().parents[2] / "traces" / "philly_models_trace3.csv"


def test_the_catalogue_and_assignment_are_seeded_sized_and_zipf_popular() -> None:
    sizes = ds.catalogue(30, seed=4)
    assert sizes == ds.catalogue(30, seed=4) and sizes != ds.catalogue(30, seed=5)
    assert len(sizes) == 30 and all(1.0 <= gb <= 500.0 for gb in sizes.values())
    from gctl.sim.traces import load_trace

    jobs = ds.assign(load_trace(TRACE, limit=600), sizes, seed=4)
    picked = Counter(j.spec.datasets[0] for j in jobs)
    assert all(len(j.spec.datasets) == 1 for j in jobs)
    assert picked["ds00"] > picked["ds29"] and picked.most_common(1)[0][1] > 600 / 30 * 2


def test_a_copy_is_waited_for_once_per_node_and_eviction_spares_datasets_in_use() -> None:
    caches = ds.Caches(ds.DataModel({"a": 100.0, "b": 60.0, "c": 50.0}, 10.0, capacity=170.0))
    none: set[str] = set()
    assert caches.copy("j1", ["a"], [("n0", 0), ("n1", 0)], 0.0, lambda _: none) == 10.0
    assert caches.copy("j2", ["a"], [("n0", 1)], 1.0, lambda _: none) == 0.0  # cached on n0
    assert caches.copy("j3", ["b"], [("n0", 2)], 2.0, lambda _: none) == 6.0  # 160 of 170 GB
    # c needs 50 GB: a (least recently used) is in use, so b goes, freeing 60 + 10 >= 1.2 x 50
    assert caches.copy("j4", ["c"], [("n0", 3)], 3.0, lambda _: {"a"}) == 5.0
    assert caches.names("n0") == {"a", "c"}
    assert caches.first_wait == {"j1": 10.0, "j2": 0.0, "j3": 6.0, "j4": 5.0}
    assert ds.ROOM_FACTOR == cache_agent.ROOM_FACTOR  # the same rule as on the hosts
    tiny = ds.Caches(ds.DataModel({"big": 500.0}, 100.0, capacity=100.0))
    assert tiny.copy("j", ["big"], [("n0", 0)], 0.0, lambda _: none) == 5.0
    assert tiny.names("n0") == frozenset()  # read without being kept


def test_affinity_shortens_the_wait_to_start_at_the_same_jct() -> None:
    """trace3's first 300 jobs on 32x8, 1 Gb/s links: copies are most of the wait to start."""
    base = SimRequest(TRACE, cluster="32x8", limit=300, datasets=30, data_bandwidth=0.125)
    cold = run(replace(base, data_affinity=False)).results[0].metrics
    warm = run(base).results[0].metrics
    without = run(SimRequest(TRACE, cluster="32x8", limit=300)).results[0].metrics
    print(
        f"avg time to first progress: {warm.avg_time_to_first_progress:.0f} s with affinity,"
        f" {cold.avg_time_to_first_progress:.0f} s without,"
        f" {without.avg_time_to_first_progress:.0f} s with no datasets;"
        f" avg JCT {warm.avg_jct:.0f} / {cold.avg_jct:.0f} s"
    )
    assert warm.avg_time_to_first_progress <= 0.7 * cold.avg_time_to_first_progress
    assert warm.avg_jct <= cold.avg_jct * 1.01
    assert without.avg_time_to_first_progress < warm.avg_time_to_first_progress
