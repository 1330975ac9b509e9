"""gctl's code that runs on a host: observations, job directories and the partition watchdog.

Sent over SSH to the host's ``python3`` (standard library only, Python 3.8
or newer, like the job SDK), never installed. Each store keeps its own tree
on a host, ``WORKDIR/stores/<store id>/``: ``jobs/<job>/a<attempt>/`` is
one attempt's job directory (mounted at ``/gctl``) and ``agent/`` holds the
watchdog's lease, lock, script and log. Modes, with a JSON request on stdin
and a JSON answer on stdout:

``observe``
    Renews the watchdog's lease (and starts the watchdog if none runs),
    reads the progress and checkpoint summaries of the job directories
    asked for (and the host's clock once read, ``read_at``: a report's
    times are the host's), and tells when the host booted and when its
    Docker engine started: a container that ended before either was
    stopped by a reboot or an engine restart, not by its own hand. With
    ``containers`` (label filters) it first lists the containers so
    labelled, inspecting those that ended (the list has no exit code),
    through the API of the engine ``docker`` reaches when that is a unix
    socket: the look needs no second round trip.
``prepare``
    Makes an attempt's job directory unless it exists: seeded with a copy of
    the newest earlier attempt's directory on this host, else empty. Each
    attempt writes only its own directory, so a stale run (a host cut off
    and back) can never overwrite the current attempt's checkpoint. The
    directory belongs to the job's user (``owner``, ``uid:gid``), mode 0700.
``standdown``
    Tells the watchdog that the daemon stopped on purpose: jobs keep running.
``watchdog``
    The watchdog itself (started by ``observe``): while the lease is renewed
    it does nothing; once it is older than its timeout (the daemon's node
    timeout) the daemon can no longer reach this host and is about to start
    its jobs elsewhere, so it kills this store's containers here. That bounds
    how long a job can run twice when a host is cut off from the daemon.
``throttle-set``
    Sets an opportunistic container's rate limit beta (TGS): writes
    ``throttle.json`` in the throttle's directory (its mtime is the
    throttle's lease) and starts the throttle unless one runs there; answers
    since when (this host's clock) the container has had this beta.
``throttle``
    The throttle itself: duty-cycles the container's cgroup freezer (v1
    ``freezer.state``, else v2 ``cgroup.freeze``), thawed for ``beta`` of
    every ``period`` and frozen for the rest (a longer cycle for a beta so
    small that the thaw would be under :data:`MIN_THAW`), re-reading ``throttle.json``
    whenever it changes. It thaws the container and exits when the file is
    removed, when the file is older than its ``lease`` (the daemon stopped
    setting beta: a container is never left frozen for want of a daemon),
    when the container is gone, or when its main process has a signal
    pending (a stop or a checkpoint asked of a frozen job: the job gets it at
    once, never after a frozen stretch). It shares the freezer with ``docker
    pause``: the daemon stops a container's throttle before it pauses it.
``split-set``
    Writes a job's batch split (``split.json``, see :mod:`gctl.job`) into
    its job directory, atomically, owned like the directory. The directory
    is the job's user's: the temporary file is created exclusively and never
    through a link the user left there.
``keep-output``
    Saves a container's output before it is removed: ``docker logs`` into a
    file of ``dir`` (the job's directory; the last ``max_bytes`` of it),
    written as ``split-set`` writes; answers the file's path, the output's
    size and its last lines.
``forget-jobs``
    Removes the job directories of jobs that ended long ago (the daemon's
    ``--output-keep``), kept output and checkpoints with them.
``observe`` also carries the throttle settings of the node's opportunistic
jobs (``throttles``: ``throttle-set`` requests, or ``{"dir", "stop": true}``
to remove one), so that a control step costs no extra round trip.
``serve``
    Answers requests of the modes above until stdin ends, one per line:
    ``{"id": N, "mode": M, "request": {...}}`` in, ``{"id": N, "answer":
    {...}}`` or ``{"id": N, "error": "..."}`` out (:mod:`gctl.hosts.agent_link`),
    so the daemon's looks cost the host neither an SSH session nor a
    ``python3`` start each.

The processes that stay (``serve``, the watchdog, throttles) run the agent
compiled (``serve`` re-executes itself from a memory file before its first
request; the others from ``watchdog.pyc`` in their directory), and import
little: some 5 MiB each, where compiling the source would leave 2 MiB more.
"""

from __future__ import annotations

# Only what every mode needs is imported here; the rest where it is used: the watchdog
# runs this same file for as long as the host does, and each module costs it memory.
import fcntl
import json
import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

PROGRESS_FILE = "progress.json"
CHECKPOINT_FILE = "checkpoint.json"
LEASE = "lease.json"
LOCK = "watchdog.lock"
SCRIPT = "watchdog.pyc"
LOG = "watchdog.log"
LABEL_STORE = "gctl.store"
LABEL_NODE = "gctl.node"
POLL_S = 1.0
"""Seconds between the watchdog's looks at its lease."""
LAPSED_POLL_S = 10.0
"""Seconds between the watchdog's looks at the engine while a lapsed lease finds nothing running.

Only a renewal (which it sees at once) makes the daemon start containers again; polling the
engine every second on every host of a daemon that stalled would add to what stalled it.
"""
THROTTLE = "throttle.json"
THROTTLE_LOCK = "throttle.lock"
THROTTLE_LOG = "throttle.log"


def read_reports(dirs: list[str]) -> dict[str, dict[str, Any]]:
    """Each job directory's last progress report and checkpoint summary (missing: absent)."""
    out: dict[str, dict[str, Any]] = {}
    for d in dirs:
        got: dict[str, Any] = {}
        for key, name in (("progress", PROGRESS_FILE), ("checkpoint", CHECKPOINT_FILE)):
            try:
                with open(os.path.join(d, name), encoding="utf-8") as fh:
                    doc = json.load(fh)
            except (OSError, ValueError):
                continue
            if not isinstance(doc, dict):
                continue
            if key == "checkpoint":
                doc = {"step": doc.get("step"), "time": doc.get("time")}
            got[key] = doc
        out[d] = got
    return out


def boot_time() -> float | None:
    """When the host booted (epoch seconds), from ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def _docker_host(docker: list[str]) -> str:
    """The engine the docker argv names: its ``-H``, else ``$DOCKER_HOST``; empty for neither."""
    return docker[docker.index("-H") + 1] if "-H" in docker else os.environ.get("DOCKER_HOST", "")


def _socket_path(docker: list[str]) -> str | None:
    """The engine's unix socket path, from ``-H`` in the docker argv or ``$DOCKER_HOST``."""
    host = _docker_host(docker)
    return host[len("unix://") :] if host.startswith("unix://") else None


def engine_socket(docker: list[str]) -> str | None:
    """The unix socket the ``docker`` argv reaches, chosen as the CLI chooses it.

    ``-H``, else ``$DOCKER_HOST``, else the default socket; None where the
    CLI would reach the engine otherwise (TCP, SSH, a docker context), which
    only the CLI itself then reaches.
    """
    if _docker_host(docker):
        return _socket_path(docker)
    if os.environ.get("DOCKER_CONTEXT") or _context_set():
        return None
    return "/var/run/docker.sock"


def _context_set() -> bool:
    """Whether the docker CLI's config picks a context other than the default."""
    config = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
    try:
        with open(os.path.join(config, "config.json"), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("currentContext") not in (None, "", "default")


def engine_start(docker: list[str], booted: float | None) -> float | None:
    """When the host's Docker engine (dockerd) started, or None when it cannot be told.

    The engine serving our socket path when one is known, else the only
    dockerd on the host.
    """
    if booted is None:
        return None
    want = _socket_path(docker)
    known = _ENGINES.get(want)
    if known is not None and _dockerd_start(known[0], want) == known[1]:
        return booted + known[1]  # the same dockerd still runs: no scan of every process
    found: list[tuple[int, float]] = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        start = _dockerd_start(pid, want)
        if start is not None:
            found.append((pid, start))
    if len(found) != 1:
        _ENGINES.pop(want, None)
        return None
    _ENGINES[want] = found[0]
    return booted + found[0][1]


_ENGINES: dict[str | None, tuple[int, float]] = {}
"""The dockerd found for each socket path: (pid, start seconds after boot); ``serve`` keeps it."""


def _dockerd_start(pid: int, want: str | None) -> float | None:
    """Seconds after boot that process ``pid`` started, if it is a dockerd serving ``want``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
        if stat[stat.find("(") + 1 : stat.rfind(")")] != "dockerd":
            return None
        if want is not None:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if want.encode() not in fh.read().replace(b"\0", b" "):
                    return None
    except OSError:
        return None
    ticks = int(stat[stat.rfind(")") + 2 :].split()[19])  # field 22: starttime
    return ticks / os.sysconf("SC_CLK_TCK")


def _write_json(path: str, doc: dict[str, Any]) -> None:
    """Replace ``path`` with ``doc`` in one step; its mtime is now."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def _own_code() -> bytes:
    """The agent compiled: the bytes of a ``.pyc`` file this host's ``python3`` runs.

    Whatever version of gctl sent it. The processes that run on (the
    watchdog, throttles, ``serve``) run from it: compiling the source at their
    start would leave each some 2 MiB of the compiler's memory.
    """
    if sys.argv[0] == "-c":
        with open("/proc/self/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
        source = args[args.index(b"-c") + 1]
    else:
        with open(sys.argv[0], "rb") as fh:
            source = fh.read()
        if source[2:4] == b"\r\n":  # a .pyc's magic number (how python3 itself tells)
            return source
    import importlib.util
    import marshal

    code = compile(source, "gctl-agent", "exec")
    # The header's flags, source time and size are not checked when python3 runs the file.
    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)


def _run_compiled(mode: str) -> None:
    """Replace this process, when sent as source, by ``mode`` run from :func:`_own_code`.

    Through a memory file, never one on disk; where there is none (or this
    process already runs compiled), it just goes on. Only before anything is
    read from stdin.
    """
    if sys.argv[0] != "-c" or not sys.executable:
        return
    try:
        fd = os.memfd_create("gctl-agent.pyc", 0)  # inherited across exec
    except (AttributeError, OSError):
        return
    with open(fd, "wb", closefd=False) as fh:
        fh.write(_own_code())
    os.execv(sys.executable, [sys.executable, "-I", "-S", f"/proc/self/fd/{fd}", mode])


def renew_lease(lease: dict[str, Any]) -> int | None:
    """Renew the watchdog's lease and make sure a watchdog runs; its pid when one was started."""
    agent_dir = str(lease["dir"])
    os.makedirs(agent_dir, mode=0o700, exist_ok=True)
    doc = {
        "timeout": float(lease["timeout"]),
        "store": str(lease["store"]),
        "node": str(lease.get("node") or ""),
        "docker": list(lease["docker"]),
        "standdown": False,
    }
    _write_json(os.path.join(agent_dir, LEASE), doc)
    return _start_once(os.path.join(agent_dir, LOCK), agent_dir, LOG, "watchdog")


def observe(request: dict[str, Any]) -> dict[str, Any]:
    """The ``observe`` mode (module docstring)."""
    answer: dict[str, Any] = {}
    docker = list(request.get("docker") or ["docker"])
    if request.get("containers"):  # first: a report read after an exit was seen is its last
        sock = engine_socket(docker)
        try:
            if sock is None:
                raise ValueError("the engine is not reached through a unix socket")
            answer["containers"] = list_containers(sock, list(request["containers"]["labels"]))
        except (OSError, ValueError) as exc:
            answer["containers_error"] = f"{type(exc).__name__}: {exc}"
    started = None
    if request.get("lease"):
        started = renew_lease(request["lease"])
    throttles: dict[str, Any] = {}
    for setting in request.get("throttles") or []:
        tdir = str(setting["dir"])
        try:
            if setting.get("stop"):
                throttles[tdir] = throttle_stop(tdir)
            else:
                throttles[tdir] = throttle_set(setting)
        except (OSError, ValueError, KeyError) as exc:
            throttles[tdir] = {"error": str(exc)}
    booted = boot_time()
    answer.update(
        reports=read_reports(list(request.get("dirs") or [])),
        read_at=time.time(),
        boot_time=booted,
        engine_start=engine_start(docker, booted),
        watchdog_started=started,
        throttles=throttles,
    )
    return answer


def _engine_get(sock: str, path: str) -> Any:
    """The JSON answer of the engine on unix socket ``sock`` to ``GET path``; None for 404.

    One HTTP/1.0 request per connection, read to its end (an HTTP/1.0 answer
    is never chunked): a few lines where ``http.client`` would cost each
    host's agent and watchdog some 3 MiB more.
    """
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30.0)
        conn.connect(sock)
        conn.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode("ascii"))
        chunks = []
        while True:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    head, ended, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split(b" ", 2)
    what = f"GET {path.split('?')[0]}"
    if not (ended and len(status) > 1 and status[0].startswith(b"HTTP/") and status[1].isdigit()):
        raise ValueError(f"{what}: not an HTTP answer: {head[:200]!r}")
    if b"\r\ntransfer-encoding:" in head.lower():
        raise ValueError(f"{what}: a chunked answer to an HTTP/1.0 request")
    code = int(status[1])
    if code == 404:
        return None
    if code != 200:
        raise ValueError(f"{what}: {code} {body[:200]!r}")
    return json.loads(body)


def _quote(text: str) -> str:
    """``text`` percent-encoded for a URL's query, every byte but ASCII letters, digits, -._~."""
    return "".join(
        chr(b) if b < 128 and (chr(b).isalnum() or chr(b) in "-._~") else f"%{b:02X}"
        for b in text.encode("utf-8")
    )


def list_containers(sock: str, labels: list[str], *, ended: bool = True) -> dict[str, Any]:
    """The containers with all ``labels`` (the engine's list), and the inspection of ended ones.

    Through the engine's API on its unix socket ``sock``; any failure is a ValueError or an
    OSError. Without ``ended``: only the running (or paused) ones, none inspected.
    """
    filters = _quote(json.dumps({"label": labels}))
    listed = _engine_get(sock, f"/containers/json?all={int(ended)}&filters={filters}") or []
    inspected = {}
    for entry in listed:
        if entry.get("State") in ("exited", "dead"):
            cid = str(entry["Id"])
            info = _engine_get(sock, f"/containers/{_quote(cid)}/json")
            if info is not None:
                inspected[cid] = info
    return {"list": listed, "inspect": inspected}


def prepare(request: dict[str, Any]) -> dict[str, Any]:
    """The ``prepare`` mode: the attempt's directory, fresh or seeded from an earlier one."""
    import shutil

    base, attempt = str(request["base"]), int(request["attempt"])
    target = os.path.join(base, f"a{attempt}")
    earlier = []
    if os.path.isdir(base):
        for name in os.listdir(base):
            if name.startswith("a") and name[1:].isdigit() and int(name[1:]) < attempt:
                earlier.append(int(name[1:]))
    seeded = None
    if not os.path.isdir(target):
        os.makedirs(base, mode=0o700, exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        if earlier:
            seeded = max(earlier)
            shutil.copytree(os.path.join(base, f"a{seeded}"), tmp, symlinks=True)
        else:
            os.makedirs(tmp)
        os.replace(tmp, target)
    owner = request.get("owner")
    if owner:  # the job's user's own, whatever the daemon's user left there
        uid, gid = (int(n) for n in str(owner).split(":"))
        for root, dirs, files in os.walk(target):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, gid)
        os.chown(target, uid, gid)
        os.chmod(target, 0o700)
    for shared in request.get("shared") or []:  # every job on the node writes there
        os.makedirs(shared, exist_ok=True)
        os.chmod(shared, 0o1777)
    keep = int(request.get("keep", 2))
    for old in sorted(earlier)[:-keep] if keep and len(earlier) > keep else []:
        shutil.rmtree(os.path.join(base, f"a{old}"), ignore_errors=True)
    report = read_reports([target])[target]
    ckpt = report.get("checkpoint") or {}
    return {"dir": target, "seeded_from": seeded, "checkpoint_time": ckpt.get("time")}


def standdown(request: dict[str, Any]) -> dict[str, Any]:
    """The ``standdown`` mode: the watchdog leaves the jobs alone until the lease is renewed."""
    path = os.path.join(str(request["dir"]), LEASE)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return {"standdown": False}
    doc["standdown"] = True
    _write_json(path, doc)
    return {"standdown": True}


def _docker(argv: list[str], *args: str) -> list[str]:
    """The words of what ``docker ARGS`` printed; OSError when it could not run or hung."""
    import subprocess

    try:
        res = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30)
    except subprocess.SubprocessError as exc:
        raise OSError(f"docker {args[0]}: {exc}") from exc
    return res.stdout.split()


def expired(agent_dir: str, at: float) -> dict[str, Any] | None:
    """The lease when it has run out at ``at`` (and no standdown); None while it holds.

    The lease's ``renewed`` is when it was last written.
    """
    path = os.path.join(agent_dir, LEASE)
    try:
        renewed = os.stat(path).st_mtime
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("standdown"):
        return None
    doc["renewed"] = renewed
    return doc if at - renewed > float(doc.get("timeout", 0)) > 0 else None


def watchdog(agent_dir: str) -> None:
    """The ``watchdog`` mode: kill this store's containers whenever the lease has run out.

    Once a lapsed lease finds nothing running, the engine is looked at again only after
    :data:`LAPSED_POLL_S`, or at once when the lease was renewed and lapsed again.
    """
    quiet: tuple[float, float] | None = None  # (until, renewed) after finding nothing
    while os.path.isdir(agent_dir):
        now = time.time()
        lease = expired(agent_dir, now)
        if lease is not None and (quiet is None or now >= quiet[0] or quiet[1] != lease["renewed"]):
            docker = [str(a) for a in lease.get("docker") or ["docker"]]
            mine = [f"{LABEL_STORE}={lease['store']}"]
            if lease.get("node"):  # an engine other nodes share: only this node's
                mine.append(f"{LABEL_NODE}={lease['node']}")
            quiet = None
            try:
                running = _running(docker, mine)
                if running:
                    _docker(docker, "unpause", *running)  # a frozen container cannot be killed
                    killed = _docker(docker, "kill", *running)
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    print(f"{stamp} lease expired: killed {' '.join(killed)}", flush=True)
                else:
                    quiet = (now + LAPSED_POLL_S, lease["renewed"])
            except (OSError, ValueError) as exc:
                print(f"watchdog: {exc}", flush=True)
        time.sleep(POLL_S)


def _running(docker: list[str], labels: list[str]) -> list[str]:
    """Ids of the running (or paused) containers with all ``labels``.

    Through the engine's socket where the CLI would use one (no process started), else
    ``docker ps``.
    """
    sock = engine_socket(docker)
    if sock is not None:
        return [str(c["Id"]) for c in list_containers(sock, labels, ended=False)["list"]]
    return _docker(
        docker, "ps", "-q", *(f for label in labels for f in ("--filter", f"label={label}"))
    )


def _locked(path: str) -> int | None:
    """An open descriptor holding ``path``'s lock, or None when someone else holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _start_once(lock: str, where: str, log_name: str, mode: str) -> int | None:
    """Start ``mode`` on ``where`` unless one holds ``lock``; its pid, or None when one runs.

    The lock is taken here and handed to the new process (an inherited
    ``flock`` stays with the open file), so two requests at once never start
    two, and the new one holds the lock from its first instant.
    """
    fd = _locked(lock)
    if fd is None:
        return None
    try:
        return _detach(where, log_name, mode, where, keep=fd)
    finally:
        os.close(fd)


def _detach(script_dir: str, log_name: str, *args: str, keep: int) -> int:
    """Start this very code with ``args`` in a session of its own (it outlives SSH); its pid.

    It inherits the descriptor ``keep`` (the lock it holds while it runs).
    It is started by a short-lived middle process, so it is never a child of
    this agent: a long-running agent (``serve``) ends with its SSH session,
    and whatever kills the session's processes must not reach the watchdog.
    """
    import subprocess

    script = os.path.join(script_dir, SCRIPT)
    with open(script, "wb") as fh:
        fh.write(_own_code())
    log = os.open(os.path.join(script_dir, log_name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    readable, writable = os.pipe()
    try:
        middle = os.fork()
        if middle == 0:
            status = 1
            try:
                os.close(readable)
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", script, *args],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(keep,),
                )
                os.write(writable, str(proc.pid).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(writable)
        writable = -1
        os.waitpid(middle, 0)
        pid = os.read(readable, 32)
    finally:
        os.close(log)
        os.close(readable)
        if writable >= 0:
            os.close(writable)
    if not pid:
        raise OSError(f"could not start {' '.join(args)}")
    return int(pid)


def freezer_of(pid: int) -> tuple[str, str, str]:
    """The freezer control file of process ``pid``'s cgroup, and its frozen and thawed values.

    cgroup v1's ``freezer.state`` when the freezer hierarchy is mounted,
    else v2's ``cgroup.freeze``. Raises OSError when neither is there.
    """
    with open(f"/proc/{pid}/cgroup", encoding="ascii") as fh:
        lines = [line.rstrip("\n").split(":", 2) for line in fh]
    for _, controllers, path in lines:
        if "freezer" in controllers.split(","):
            v1 = f"/sys/fs/cgroup/freezer{path}/freezer.state"
            if os.path.exists(v1):
                return v1, "FROZEN", "THAWED"
    for hierarchy, _, path in lines:
        v2 = f"/sys/fs/cgroup{path}/cgroup.freeze"
        if hierarchy == "0" and os.path.exists(v2):
            return v2, "1", "0"
    raise OSError(f"process {pid}: no cgroup freezer found")


def throttle_set(request: dict[str, Any]) -> dict[str, Any]:
    """The ``throttle-set`` mode: beta for a container, and since when (this host's clock).

    ``since`` is when this beta was first set (a progress rate measured
    before it says nothing of it); ``started`` the throttle's pid when one
    was started.
    """
    tdir = str(request["dir"])
    os.makedirs(tdir, mode=0o700, exist_ok=True)
    beta = min(max(float(request["beta"]), 0.0), 1.0)
    config = os.path.join(tdir, THROTTLE)
    try:
        with open(config, encoding="utf-8") as fh:
            old = json.load(fh)
        since = float(old["since"]) if old.get("beta") == beta else time.time()
    except (OSError, ValueError, KeyError, TypeError):
        since = time.time()
    doc = {
        "container": str(request["container"]),
        "beta": beta,
        "since": since,
        "period": float(request.get("period", 0.1)),
        "lease": float(request.get("lease", 10.0)),
        "docker": list(request.get("docker") or ["docker"]),
    }
    _write_json(config, doc)
    started = _start_once(os.path.join(tdir, THROTTLE_LOCK), tdir, THROTTLE_LOG, "throttle")
    return {"started": started, "beta": beta, "since": since}


def split_set(request: dict[str, Any]) -> dict[str, Any]:
    """The ``split-set`` mode: ``split.json`` in the job directory ``dir``; its version."""
    split = request["split"]
    data = json.dumps({"version": int(split["version"]), "plan": split["plan"]}).encode()
    _write_owned(str(request["dir"]), "split.json", [data])
    return {"version": int(split["version"])}


def _write_owned(job_dir: str, name: str, chunks: list[bytes]) -> None:
    """Replace ``name`` in the job's directory with ``chunks``, owned as the directory is.

    The directory is the job's user's: the temporary file is created
    exclusively and never through a link the user left there, and the
    rename replaces a link named ``name`` rather than following it.
    """
    st = os.stat(job_dir, follow_symlinks=False)
    tmp = os.path.join(job_dir, f".{name}.{os.getpid()}.{time.time_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fchown(fd, st.st_uid, st.st_gid)
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(job_dir, name))


def forget_jobs(request: dict[str, Any]) -> dict[str, Any]:
    """The ``forget-jobs`` mode: remove the job directories of ``jobs`` under ``base``.

    ``base`` is the store's ``jobs`` directory (the daemon's); each job's
    directory in it is removed whole, never through a link.
    """
    import shutil

    base = str(request["base"])
    removed = []
    for job_id in request.get("jobs") or []:
        path = os.path.join(base, str(int(job_id)))
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
        else:
            continue
        removed.append(int(job_id))
    return {"removed": removed}


def keep_output(request: dict[str, Any]) -> dict[str, Any]:
    """The ``keep-output`` mode: a container's output saved as a file in ``dir``.

    Reads ``docker logs`` of ``container`` (stdout and stderr in the order
    the engine gives them) and keeps its last ``max_bytes`` in ``name``
    under ``dir`` (a first line says how much was dropped); answers the
    file's path, the output's whole size, and its last ``tail_lines`` lines
    (at most ``tail_bytes``) for the store.
    """
    import collections
    import subprocess

    docker = [str(a) for a in request.get("docker") or ["docker"]]
    most = int(request["max_bytes"])
    proc = subprocess.Popen(
        [*docker, "logs", str(request["container"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    kept: collections.deque[bytes] = collections.deque()
    size = held = 0
    out = proc.stdout
    assert out is not None
    for chunk in iter(lambda: out.read(1 << 16), b""):
        kept.append(chunk)
        size += len(chunk)
        held += len(chunk)
        while held - len(kept[0]) >= most:
            held -= len(kept.popleft())
    if proc.wait() != 0:
        text = b"".join(kept).decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(f"docker logs: {text[-1] if text else 'failed'}")
    data = b"".join(kept)[-most:] if most > 0 else b""
    dropped = size - len(data)
    head = (
        [f"[gctl: the first {dropped} bytes of output were not kept]\n".encode()] if dropped else []
    )
    _write_owned(str(request["dir"]), str(request["name"]), [*head, data])
    tail_bytes = int(request.get("tail_bytes", 65536))
    lines = data[-tail_bytes:].decode("utf-8", "replace").splitlines()
    tail = lines[-int(request.get("tail_lines", 100)) :] if lines else []
    return {
        "path": os.path.join(str(request["dir"]), str(request["name"])),
        "bytes": size,
        "tail": "\n".join(tail),
    }


MIN_THAW = 0.01
"""Shortest thawed stretch of a throttle (s): a thaw much shorter than the host's scheduling
latency lets the job do nothing at all, so a small beta stretches the cycle instead."""


def duty_cycle(beta: float, period: float) -> tuple[float, float]:
    """Seconds thawed, then frozen, of one throttle cycle running a job for ``beta`` of the time.

    A cycle is ``period`` long unless its thawed part would be shorter than
    :data:`MIN_THAW`; then the cycle is longer, for the same fraction.
    """
    beta = min(max(beta, 0.0), 1.0)
    if beta in (0.0, 1.0):
        return beta * period, (1 - beta) * period
    thaw = max(beta * period, MIN_THAW)
    return thaw, thaw * (1 - beta) / beta


def throttle_stop(tdir: str) -> dict[str, Any]:
    """Remove a throttle's setting: it thaws its container and exits within a period."""
    try:
        os.unlink(os.path.join(tdir, THROTTLE))
    except FileNotFoundError:
        return {"stopped": False}
    return {"stopped": True}


def _signalled(pid: int) -> bool | None:
    """Whether process ``pid`` has a signal pending; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return None
    return any(int(fields.get(k, "0").strip(), 16) for k in ("SigPnd", "ShdPnd"))


def _freeze(path: str, value: str) -> bool:
    """Write the freezer; False when the cgroup is gone (the container ended).

    A write refused while the cgroup is still there (a freeze under way) is
    tried again at the next period.
    """
    try:
        with open(path, "w", encoding="ascii") as fh:
            fh.write(value)
    except OSError as exc:
        if os.path.exists(path):
            print(f"throttle: {path}: {exc}", flush=True)
            return True
        return False
    return True


def throttle(tdir: str) -> None:
    """The ``throttle`` mode (module docstring)."""
    import signal

    config = os.path.join(tdir, THROTTLE)
    with open(config, encoding="utf-8") as fh:
        doc = json.load(fh)
    out = _docker(list(doc["docker"]), "inspect", "-f", "{{.State.Pid}}", str(doc["container"]))
    pid = int(out[0])
    path, frozen, thawed = freezer_of(pid)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    seen, why = 0.0, "container gone"
    try:
        while True:
            pending = _signalled(pid)
            if pending is None:
                why = f"container gone (process {pid} ended)"
                break
            if pending:
                why = "a signal is pending for the job"
                break
            try:
                mtime = os.stat(config).st_mtime
                if mtime != seen:
                    with open(config, encoding="utf-8") as fh:
                        doc, seen = json.load(fh), mtime
            except (OSError, ValueError):
                why = "stopped"
                break
            if time.time() - mtime > float(doc["lease"]):
                why = "lease expired"
                break
            thaw, freeze = duty_cycle(float(doc["beta"]), float(doc["period"]))
            if thaw > 0:
                if not _freeze(path, thawed):
                    break
                time.sleep(thaw)
            if freeze > 0:
                if not _freeze(path, frozen):
                    break
                time.sleep(freeze)
    finally:
        _freeze(path, thawed)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(f"{stamp} throttle of {doc['container'][:12]} ended ({why}): thawed", flush=True)


MODES = {
    "observe": observe,
    "prepare": prepare,
    "standdown": standdown,
    "throttle-set": throttle_set,
    "split-set": split_set,
    "keep-output": keep_output,
    "forget-jobs": forget_jobs,
}
"""The modes that answer one JSON request, by name."""


def serve() -> None:
    """The ``serve`` mode (module docstring): requests by line until stdin ends."""
    _run_compiled("serve")
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        ident = None
        try:
            message = json.loads(line)
            ident = message.get("id")
            answer = {"id": ident, "answer": MODES[message["mode"]](message["request"])}
        except Exception as exc:  # one bad request must not end the agent: it is told back
            answer = {"id": ident, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Run one mode; the one-request modes read their JSON request on stdin."""
    mode = argv[1] if len(argv) > 1 else ""
    if mode in ("watchdog", "throttle") and len(argv) == 3:
        (watchdog if mode == "watchdog" else throttle)(argv[2])
        return 0
    if mode == "serve":
        serve()
        return 0
    if mode not in MODES:
        print(f"usage: {argv[0]} serve|{'|'.join(MODES)} < request.json", file=sys.stderr)
        return 2
    json.dump(MODES[mode](json.load(sys.stdin)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
