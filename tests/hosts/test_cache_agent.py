"""The dataset cache agent run here on local directories: manifests, fills, checks, eviction."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gctl.hosts import cache_agent as ca

NO_DOCKER = ["true"]  # an engine with no container: nothing in use


def _dataset(root: Path, files: int = 30) -> Path:
    for i in range(files):
        sub = root / f"d{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}.bin").write_bytes(os.urandom(100 + i))
    (root / "link").symlink_to("d0/f0.bin")
    return root


def _tar(root: Path) -> bytes:
    return subprocess.run(
        ["tar", "-c", "-C", str(root), "."], capture_output=True, check=True
    ).stdout


def _fill(cache: Path, src: Path, digest: str, **more: Any) -> dict[str, Any]:
    got = ca.manifest({"dir": str(src)})
    request = {"dir": str(cache), "key": f"ds@{digest[:16]}", "name": "ds", "digest": digest}
    request |= {"bytes": got.get("bytes", 0), "docker": NO_DOCKER, **more}
    return ca.fill(request, io.BytesIO(more.pop("stream", None) or _tar(src)))


def test_the_manifest_covers_paths_sizes_contents_and_links(tmp_path: Path) -> None:
    src = _dataset(tmp_path / "src")
    first = ca.manifest({"dir": str(src)})
    assert first["files"] == 30 and first["bytes"] == sum(100 + i for i in range(30))
    assert ca.manifest({"dir": str(src)}) == first  # stable
    (src / "d1" / "f1.bin").write_bytes(b"x" * 101)  # same size, other content
    second = ca.manifest({"dir": str(src)})
    assert second["digest"] != first["digest"]
    (src / "link").unlink()
    (src / "link").symlink_to("d1/f1.bin")
    assert ca.manifest({"dir": str(src)})["digest"] != second["digest"]
    os.mkfifo(src / "pipe")
    assert "not a regular file" in ca.manifest({"dir": str(src)})["error"]


def test_a_fill_lands_complete_is_checked_then_reused_and_a_changed_copy_is_dropped(
    tmp_path: Path,
) -> None:
    src, cache = _dataset(tmp_path / "src"), tmp_path / "cache"
    digest = ca.manifest({"dir": str(src)})["digest"]
    key = f"ds@{digest[:16]}"
    got = _fill(cache, src, digest)
    assert got["cached"] is False and got["bytes"] > 0 and got["evicted"] == []
    assert ca.manifest({"dir": str(cache / key)})["digest"] == digest  # gctl's files left out
    assert [e["key"] for e in ca.list_cache({"dir": str(cache)})["entries"]] == [key]
    assert ca.check({"dir": str(cache), "key": key, "digest": digest}) == {"cached": True}
    assert _fill(cache, src, digest)["cached"] is True  # there already: the stream is drained
    (cache / key / "d2" / "f2.bin").write_bytes(b"corrupted")
    why = ca.check({"dir": str(cache), "key": key, "digest": digest})
    assert why["cached"] is False and "changed" in why["why"] and not (cache / key).exists()
    assert _fill(cache, src, digest)["cached"] is False  # filled again


def test_a_stream_that_does_not_match_the_digest_or_stops_short_leaves_nothing(
    tmp_path: Path,
) -> None:
    src, cache = _dataset(tmp_path / "src"), tmp_path / "cache"
    digest = ca.manifest({"dir": str(src)})["digest"]
    wrong = _fill(cache, src, "0" * 64)
    assert wrong["mismatch"] is True and "digest mismatch" in wrong["error"]
    cut = _fill(cache, src, digest, stream=_tar(src)[:5000])  # a daemon killed mid-copy
    assert "error" in cut
    left = sorted(p.name for p in cache.iterdir())  # only the key locks: no copy, no partial
    assert left == sorted([f".lock-ds@{digest[:16]}", ".lock-ds@0000000000000000"])


def test_a_fill_makes_room_by_evicting_the_least_recently_used_copies_not_in_use(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    digests = {}
    for i, name in enumerate(["old", "mid", "new"]):
        src = tmp_path / name
        (src / "x").parent.mkdir(parents=True)
        (src / "x").write_bytes(b"a" * 1000 * (i + 1))
        digests[name] = ca.manifest({"dir": str(src)})["digest"]
        request = {"dir": str(cache), "key": f"{name}@{digests[name][:16]}", "name": name}
        request |= {"digest": digests[name], "bytes": 1000 * (i + 1), "docker": NO_DOCKER}
        assert "error" not in ca.fill(request, io.BytesIO(_tar(src)))
        os.utime(cache / request["key"] / ca.LAST_USED, (1000.0 + i, 1000.0 + i))
    big = _dataset(tmp_path / "big", files=10)
    got = ca.manifest({"dir": str(big)})
    request = {"dir": str(cache), "key": "big@x", "name": "big", "digest": got["digest"]}
    request |= {"bytes": got["bytes"], "docker": NO_DOCKER, "keep": [f"old@{digests['old'][:16]}"]}
    request["capacity"] = 6000 + got["bytes"] // 2  # holds 6000 now: room for half of it
    filled = ca.fill(request, io.BytesIO(_tar(big)))
    # "old" is the least recently used but in use; "mid" next: 522 + 2000 bytes >= 1.2 x 1045.
    assert filled["evicted"] == [f"mid@{digests['mid'][:16]}"]
    left = {e["name"] for e in ca.list_cache({"dir": str(cache)})["entries"]}
    assert left == {"old", "new", "big"}


ENTRY = st.fixed_dictionaries(
    {
        "bytes": st.integers(0, 1000),
        "last_used": st.floats(0, 100),
        "key": st.text("abc", min_size=3, max_size=6),
    }
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(ENTRY, max_size=12, unique_by=lambda e: e["key"]),
    st.integers(0, 3000),
    st.integers(0, 2000),
    st.data(),
)
def test_eviction_frees_1_2_times_the_need_lru_first_and_never_what_is_kept(
    entries: list[dict[str, Any]], need: int, available: int, data: st.DataObject
) -> None:
    keep = set(data.draw(st.lists(st.sampled_from([e["key"] for e in entries] or ["-"]))))
    plan = ca.plan_room(entries, need, available, keep)
    evictable = sorted(
        (e for e in entries if e["key"] not in keep), key=lambda e: (e["last_used"], e["key"])
    )
    if need <= available:
        assert plan == []
        return
    if available + sum(e["bytes"] for e in evictable) < need:
        assert plan is None
        return
    assert plan is not None and not keep & set(plan)
    assert plan == [e["key"] for e in evictable[: len(plan)]]  # least recently used first
    freed = available + sum(e["bytes"] for e in evictable[: len(plan)])
    assert freed >= need
    if len(plan) < len(evictable):  # it stopped early: only once 1.2x was reached
        assert freed >= ca.ROOM_FACTOR * need
    if plan:  # and not later than that
        assert freed - evictable[len(plan) - 1]["bytes"] < ca.ROOM_FACTOR * need


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sets(st.integers(0, 5), max_size=3)),
        min_size=1,
        max_size=12,
    ),
    st.integers(3000, 12000),
)
def test_a_sequence_of_fills_never_evicts_a_copy_in_use_and_keeps_within_the_cache(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[int, set[int]]],
    capacity: int,
) -> None:
    """Six datasets of 1-6 kB; each step fills one while others are in use (hypothesis)."""
    root = tmp_path_factory.mktemp("seq")
    cache = root / "cache"
    sources, digests = [], []
    for i in range(6):
        src = root / f"s{i}"
        src.mkdir()
        (src / "x").write_bytes(bytes([i]) * 1000 * (i + 1))
        sources.append(src)
        digests.append(ca.manifest({"dir": str(src)})["digest"])
    keys = [f"s{i}@{d[:16]}" for i, d in enumerate(digests)]
    for clock, (want, using) in enumerate(steps):
        before = {e["key"] for e in ca.list_cache({"dir": str(cache)})["entries"]}
        keep = [keys[u] for u in using if u != want]
        request = {"dir": str(cache), "key": keys[want], "name": f"s{want}"}
        request |= {"digest": digests[want], "bytes": 1000 * (want + 1), "docker": NO_DOCKER}
        request |= {"keep": keep, "capacity": capacity}
        got = ca.fill(request, io.BytesIO(_tar(sources[want])))
        entries = ca.list_cache({"dir": str(cache)})["entries"]
        after = {e["key"] for e in entries}
        assert set(keep) & before <= after  # a copy in use is never evicted
        assert set(got.get("evicted", [])) & set(keep) == set()
        if "error" in got:  # no room without evicting what is in use: nothing else changed
            assert "no room" in got["error"] and after == before
            continue
        assert keys[want] in after
        assert sum(e["bytes"] for e in entries) <= capacity
        if got.get("evicted"):  # it evicted: 1.2x the need was made free, or all it could
            free = capacity - sum(e["bytes"] for e in entries) + 1000 * (want + 1)
            evictable = before - set(keep) - {keys[want]} - set(got["evicted"])
            assert free >= ca.ROOM_FACTOR * 1000 * (want + 1) or not evictable
        for e in entries:  # the LRU clock moves: the filled copy is the newest
            os.utime(cache / e["key"] / ca.LAST_USED, (clock, clock))
        os.utime(cache / keys[want] / ca.LAST_USED, (clock + 0.5, clock + 0.5))
