"""The daemon's checkpoint mirror: copies kept per attempt, safe from several threads."""

from __future__ import annotations

import threading
from pathlib import Path

from gctl.daemon.jobfiles import Mirror


def test_a_newer_attempt_replaces_the_older_copies(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "m")
    mirror.save(7, 1, b"one", 100.0)
    mirror.save(7, 2, b"two", 200.0)
    assert mirror.load(7) == b"two"
    assert mirror.checkpoint_time(7) == 200.0
    assert sorted(p.name for p in (tmp_path / "m" / "7").iterdir()) == ["a2.tar"]
    mirror.drop(7)
    assert mirror.load(7) is None


def test_copies_of_one_attempt_taken_at_once_all_land(tmp_path: Path) -> None:
    """A heartbeat copies an attempt that ended while its move copies it too (CI failure).

    Both wrote the same temporary name: one renamed it, the other's rename
    found nothing and the daemon stopped.
    """
    mirror = Mirror(tmp_path / "m")
    errors: list[BaseException] = []
    go = threading.Barrier(8)

    def save(n: int) -> None:
        go.wait()
        try:
            for i in range(50):
                mirror.save(3, 12, f"copy {n} {i}".encode(), 50.0)
        except BaseException as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (mirror.load(3) or b"").startswith(b"copy ")
    assert sorted(p.name for p in (tmp_path / "m" / "3").iterdir()) == ["a12.tar"]
