"""gctl's dataset cache on a host: manifests, cached copies, filling and eviction.

Sent over SSH to the host's ``python3`` like :mod:`gctl.hosts.agent`
(standard library only, Python 3.8 or newer), never installed. A node keeps
its cached datasets in one directory, each copy at ``<name>@<digest[:16]>``
(the *key*) holding the dataset's files, ``.gctl-dataset.json`` (its
digest, size and every file's size and modification time, written when it
was filled) and ``.gctl-last-used`` (touched by every use: the LRU clock).
A copy is filled under ``.partial-<key>`` and renamed into place only once
its manifest matches: a copy under its key is always complete, whatever
stopped a fill. Modes, with a JSON request on stdin and a JSON answer on
stdout:

``manifest``
    The digest of a directory: SHA-256 over every entry, sorted by path: a
    regular file's path, size and content hash, a link's path and target.
    Also its bytes and file count. Special files are refused.
``list``
    The copies in a cache directory: key, name, digest, bytes, last use;
    and the disk's free bytes.
``check``
    Whether a copy is there and intact: every file still has the size and
    modification time it was filled with, and no file was added or removed.
    A copy that is not is removed (it will be filled again). An intact one
    is touched (used now).
``fill``
    The request is the first line of stdin; a tar stream of the dataset
    follows. Under the key's lock: when the copy is already there (another
    fill got it first) the stream is drained; otherwise room is made (least
    recently used copies not in use are evicted until 1.2 times the
    dataset's size is available; a copy is in use when a container on the
    host's engine names it in its ``gctl.datasets`` label, or the request
    keeps it), the stream is unpacked by ``tar``, its manifest is checked
    against the dataset's digest, and it is renamed into place.
    With ``fetch`` in the request (an rsync location: ``rsync://HOST/...``,
    ``HOST::MODULE/...`` or ``[USER@]HOST:/PATH`` over SSH) the host fetches
    the copy from there with ``rsync`` instead, and no stream follows.
``fetch``
    A new dataset at an rsync location: fetched, its manifest read (and
    checked against a digest when one is given), and the copy kept as the
    cache's first when it fits without evicting.
``remove``
    Removes a copy unless a container uses it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any

META = ".gctl-dataset.json"
LAST_USED = ".gctl-last-used"
OWN = (META, LAST_USED)
"""gctl's files in a cached copy: not part of the dataset."""
PARTIAL = ".partial-"
LABEL_DATASETS = "gctl.datasets"
ROOM_FACTOR = 1.2
"""Eviction frees until this many times the dataset's size is available (the Inspur paper)."""
CHUNK = 1 << 20


def _walk(root: str) -> list[tuple[str, str]]:
    """Every entry under ``root`` but directories and gctl's own files: (relative path, full)."""
    out: list[tuple[str, str]] = []
    for here, dirs, files in os.walk(root):
        dirs.sort()
        for name in files + [d for d in dirs if os.path.islink(os.path.join(here, d))]:
            full = os.path.join(here, name)
            rel = os.path.relpath(full, root)
            if rel in OWN:
                continue
            out.append((rel, full))
    return sorted(out)


def manifest(request: dict[str, Any]) -> dict[str, Any]:
    """The ``manifest`` mode (module docstring): digest, bytes, files; or an error."""
    root = str(request["dir"])
    if not os.path.isdir(root):
        return {"error": f"{root}: not a directory"}
    digest, total, count = hashlib.sha256(), 0, 0
    for rel, full in _walk(root):
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            digest.update(f"L\0{rel}\0{os.readlink(full)}\n".encode())
            continue
        if not stat.S_ISREG(st.st_mode):
            return {"error": f"{full}: not a regular file, directory or link"}
        content = hashlib.sha256()
        with open(full, "rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                content.update(block)
        digest.update(f"F\0{rel}\0{st.st_size}\0{content.hexdigest()}\n".encode())
        total += st.st_size
        count += 1
    return {"digest": digest.hexdigest(), "bytes": total, "files": count}


def _stats(root: str) -> dict[str, list[int]]:
    """Each entry's size and modification time (ns), for :func:`check`."""
    out: dict[str, list[int]] = {}
    for rel, full in _walk(root):
        st = os.lstat(full)
        out[rel] = [st.st_size, st.st_mtime_ns]
    return out


def _read_meta(path: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(path, META), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _last_used(path: str) -> float:
    try:
        return os.stat(os.path.join(path, LAST_USED)).st_mtime
    except OSError:
        return 0.0


def _touch(path: str) -> None:
    with open(os.path.join(path, LAST_USED), "a", encoding="ascii"):
        pass
    os.utime(os.path.join(path, LAST_USED))


def _entries(cache: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in sorted(os.listdir(cache)) if os.path.isdir(cache) else []:
        path = os.path.join(cache, key)
        meta = None if key.startswith(".") else _read_meta(path)
        if meta is None:
            continue
        out.append(
            {
                "key": key,
                "name": meta.get("name"),
                "digest": meta.get("digest"),
                "bytes": int(meta.get("bytes") or 0),
                "last_used": _last_used(path),
            }
        )
    return out


def _free(cache: str) -> int:
    st = os.statvfs(cache)
    return st.f_bavail * st.f_frsize


def list_cache(request: dict[str, Any]) -> dict[str, Any]:
    """The ``list`` mode (module docstring)."""
    cache = str(request["dir"])
    if not os.path.isdir(cache):
        return {"entries": [], "free": None}
    return {"entries": _entries(cache), "free": _free(cache)}


def check(request: dict[str, Any]) -> dict[str, Any]:
    """The ``check`` mode: ``{"cached": bool, "why": ...}`` (module docstring)."""
    path = os.path.join(str(request["dir"]), str(request["key"]))
    meta = _read_meta(path)
    if meta is None:
        return {"cached": False, "why": "not cached"}
    if meta.get("digest") != request.get("digest") or _stats(path) != meta.get("stats"):
        shutil.rmtree(path, ignore_errors=True)
        return {"cached": False, "why": "the cached copy changed since it was filled: removed"}
    _touch(path)
    return {"cached": True}


def key(name: str, digest: str) -> str:
    """A copy's directory name in a node's cache: ``NAME@DIGEST[:16]``."""
    return name + "@" + digest[:16]


def _in_use(docker: list[str]) -> set[str]:
    """Keys named by the ``gctl.datasets`` label of any container on the host's engine."""
    fmt = '{{.Label "' + LABEL_DATASETS + '"}}'
    argv = [*docker, "ps", "-a", "--filter", "label=" + LABEL_DATASETS, "--format", fmt]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise OSError("docker ps failed: " + res.stderr.strip()[-200:])
    return {k for line in res.stdout.split() for k in line.split(",") if k}


def plan_room(
    entries: list[dict[str, Any]], need: int, available: int, keep: set[str]
) -> list[str] | None:
    """Keys to evict, least recently used first, so that 1.2 x ``need`` is available.

    Nothing when ``need`` fits already; None when even evicting every copy
    not in ``keep`` leaves too little for ``need`` itself.
    """
    if need <= available:
        return []
    evict: list[str] = []
    free = available
    for entry in sorted(entries, key=lambda e: (e["last_used"], e["key"])):
        if free >= ROOM_FACTOR * need:
            break
        if entry["key"] in keep:
            continue
        evict.append(entry["key"])
        free += int(entry["bytes"])
    return evict if free >= need else None


def _available(cache: str, capacity: int | None, entries: list[dict[str, Any]]) -> int:
    free = _free(cache)
    if capacity is None:
        return free
    return max(0, min(free, capacity - sum(int(e["bytes"]) for e in entries)))


def _unpack(stream: Any, into: str) -> tuple[int, int, str]:
    """Unpack the tar ``stream`` into ``into`` with ``tar``: bytes read, its status, its stderr."""
    received = 0
    with tempfile.TemporaryFile() as errors:
        tar = subprocess.Popen(
            ["tar", "-x", "--no-same-owner", "-C", into], stdin=subprocess.PIPE, stderr=errors
        )
        assert tar.stdin is not None
        try:
            for block in iter(lambda: stream.read(CHUNK), b""):
                tar.stdin.write(block)
                received += len(block)
        except BrokenPipeError:
            pass
        tar.stdin.close()
        rc = tar.wait()
        errors.seek(0)
        return received, rc, errors.read().decode(errors="replace")


def _fetch(url: str, into: str) -> tuple[int, str]:
    """Copy the dataset at the rsync location ``url`` into ``into``: rsync's status, its stderr.

    ``-s`` keeps the remote path one argument (no remote shell splitting);
    SSH locations use the host's own SSH setup, never asking for a password.
    """
    src = url.rstrip("/") + "/"
    daemon = url.startswith("rsync://") or "::" in url.split("/", 1)[0]
    ssh = [] if daemon else ["-e", "ssh -o BatchMode=yes"]  # (with a daemon, -e would tunnel)
    argv = ["rsync", "-a", "-s", "--delete", *ssh, "--", src, into + "/"]
    try:
        res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    except OSError as exc:
        return 127, "cannot run rsync (install it on the node): " + str(exc.strerror)
    return res.returncode, res.stderr.decode(errors="replace")


def _seal(partial: str, final: str, name: str, got: dict[str, Any]) -> None:
    """Make the checked copy in ``partial`` the complete copy ``final``, used now."""
    meta = {
        "name": name,
        "digest": got["digest"],
        "bytes": got["bytes"],
        "files": got["files"],
        "stats": _stats(partial),
        "filled_at": time.time(),
    }
    with open(os.path.join(partial, META), "w", encoding="utf-8") as fh:
        json.dump(meta, fh)
    os.rename(partial, final)
    _touch(final)


def fill(request: dict[str, Any], stream: Any) -> dict[str, Any]:
    """The ``fill`` mode (module docstring); ``stream`` is the tar stream.

    With ``fetch`` in the request (an rsync location) the copy is fetched
    from there by the host itself instead, and the stream is empty.
    """
    cache, key = str(request["dir"]), str(request["key"])
    os.makedirs(cache, mode=0o755, exist_ok=True)
    final = os.path.join(cache, key)
    lock = os.open(os.path.join(cache, ".lock-" + key), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _read_meta(final) is not None:
            while stream.read(CHUNK):
                pass
            _touch(final)
            return {"cached": True, "evicted": []}
        need = int(request["bytes"])
        entries = [e for e in _entries(cache) if e["key"] != key]
        keep = _in_use(list(request.get("docker") or ["docker"])) | set(request.get("keep") or [])
        capacity = request.get("capacity")
        available = _available(cache, None if capacity is None else int(capacity), entries)
        evict = plan_room(entries, need, available, keep)
        if evict is None:
            return {"error": f"no room: {need} bytes needed, {available} available"}
        for gone in evict:
            shutil.rmtree(os.path.join(cache, gone), ignore_errors=True)
        partial = os.path.join(cache, PARTIAL + key)
        shutil.rmtree(partial, ignore_errors=True)  # a fill that was stopped
        os.makedirs(partial, mode=0o755)
        began = time.monotonic()
        url = request.get("fetch")
        if url:
            received, (rc, err) = 0, _fetch(str(url), partial)
        else:
            received, rc, err = _unpack(stream, partial)
        if rc != 0:
            shutil.rmtree(partial, ignore_errors=True)
            what = "fetching" if url else "unpacking"
            return {"error": what + " failed: " + err.strip()[-200:], "evicted": evict}
        got = manifest({"dir": partial})
        if got.get("digest") != request["digest"]:
            shutil.rmtree(partial, ignore_errors=True)
            why = got.get("error") or f"digest mismatch: got {str(got.get('digest'))[:16]}"
            return {"error": why, "mismatch": "error" not in got, "evicted": evict}
        _seal(partial, final, str(request["name"]), got)
        seconds = time.monotonic() - began
        moved = received or int(got["bytes"])
        return {"cached": False, "bytes": moved, "seconds": seconds, "evicted": evict}
    finally:
        os.close(lock)


def fetch(request: dict[str, Any]) -> dict[str, Any]:
    """The ``fetch`` mode: a new dataset's manifest, read from a copy fetched from its location.

    The copy is kept as this cache's first one when it fits without evicting
    anything (``kept``); otherwise it is deleted. With a ``digest`` in the
    request, a copy that does not match it is refused.
    """
    cache, name = str(request["dir"]), str(request["name"])
    os.makedirs(cache, mode=0o755, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=PARTIAL + "new-", dir=cache)
    try:
        rc, err = _fetch(str(request["url"]), partial)
        if rc != 0:
            return {"error": "fetching failed: " + err.strip()[-200:]}
        got = manifest({"dir": partial})
        if "error" in got:
            return got
        want = request.get("digest")
        if want and got["digest"] != want:
            return {"error": f"not the digest given: its manifest is {got['digest']}"}
        copy = key(name, str(got["digest"]))
        final = os.path.join(cache, copy)
        lock = os.open(os.path.join(cache, ".lock-" + copy), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            capacity = request.get("capacity")
            entries = _entries(cache)
            room = _available(cache, None if capacity is None else int(capacity), entries)
            kept = _read_meta(final) is None and int(got["bytes"]) <= room
            if kept:
                _seal(partial, final, name, got)
        finally:
            os.close(lock)
        return {**got, "key": copy, "kept": kept}
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def remove(request: dict[str, Any]) -> dict[str, Any]:
    """The ``remove`` mode: ``{"removed": bool}``, or an error when a container uses it."""
    cache, key = str(request["dir"]), str(request["key"])
    if key in _in_use(list(request.get("docker") or ["docker"])):
        return {"error": f"{key} is in use by a container"}
    path = os.path.join(cache, key)
    if not os.path.isdir(path):
        return {"removed": False}
    shutil.rmtree(path)
    return {"removed": True}


def main(argv: list[str]) -> int:
    """Run one mode (module docstring)."""
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "fill":
        request = json.loads(sys.stdin.buffer.readline())
        json.dump(fill(request, sys.stdin.buffer), sys.stdout)
        return 0
    modes = {
        "manifest": manifest,
        "list": list_cache,
        "check": check,
        "fetch": fetch,
        "remove": remove,
    }
    if mode not in modes:
        print(f"usage: {argv[0]} fill|{'|'.join(modes)} < request.json", file=sys.stderr)
        return 2
    json.dump(modes[mode](json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
