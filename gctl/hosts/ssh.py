"""SSH to the GPU hosts: pinned host keys, one pooled connection per host, quoted commands.

Every connection checks the host's key against the SHA256 fingerprint the
operator confirmed when the node was added; nothing is ever accepted blindly
and ``known_hosts`` is not consulted (the store is the one record). Remote
commands are argument lists, joined with POSIX shell quoting, so no user text
reaches the remote shell unquoted. ``~/.ssh/config`` supplies what a node
does not say itself (HostName for aliases, User, Port, IdentityFile,
ProxyCommand).
"""

from __future__ import annotations

import json
import logging
import resource
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import paramiko

T = TypeVar("T")

CONNECT_TIMEOUT = 10.0
"""Seconds to open TCP, exchange banners and authenticate."""
COMMAND_TIMEOUT = 60.0
"""Default seconds a remote command may run."""
KEEPALIVE = 15
"""Seconds between SSH keepalives on an idle pooled connection."""
TRANSPORT_POLL = 1.0
"""Seconds an idle connection's paramiko thread sleeps between its checks: paramiko's own
0.1 s costs a thousand nodes' connections ten thousand wake-ups a second. A closed
connection's thread ends within this, and keepalives need no finer step."""

# paramiko's transport thread logs a failed handshake (a port that is not SSH, a host that
# hangs up) as an ERROR with two tracebacks, and with no handler Python prints them on
# stderr: 21 lines per node before gctl's own one-line error for it. Every such failure
# reaches gctl as the exception it maps to a HostError, so its log says nothing more.
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)


class HostError(Exception):
    """A host could not be reached or did not do what was asked; the message is one line.

    ``permanent``: asking again cannot help (no such image, a spec the
    engine refuses), unlike a host that did not answer. ``fails_job``: the
    job cannot run as it was submitted (its dataset's copies never match the
    digest), so a start it stopped ends the job FAILED instead of holding it.
    """

    def __init__(
        self, node: str, message: str, *, permanent: bool = False, fails_job: bool = False
    ) -> None:
        super().__init__(f"{node}: {message}")
        self.node = node
        self.permanent = permanent or fails_job
        self.fails_job = fails_job


class UnknownHostKey(HostError):
    """The node has no confirmed host key yet; ``fingerprint`` is what the host presented."""

    def __init__(self, node: str, key_type: str, fingerprint: str) -> None:
        super().__init__(node, f"host key not confirmed yet: {key_type} {fingerprint}")
        self.key_type = key_type
        self.fingerprint = fingerprint


class HostKeyMismatch(HostError):
    """The host presented a key other than the confirmed one: refused."""

    def __init__(self, node: str, expected: str, got: str) -> None:
        super().__init__(
            node,
            f"HOST KEY CHANGED, refusing to connect: expected {expected}, host sent {got}",
        )
        self.expected = expected
        self.got = got


class CommandTimeout(HostError):
    """A remote command ran past its time limit."""


@dataclass(frozen=True, slots=True)
class Target:
    """How to reach one node: what the store records about it."""

    node: str
    host: str
    port: int | None = None
    user: str | None = None
    key_path: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """What a remote command did."""

    rc: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        """Standard output as text."""
        return self.stdout.decode(errors="replace")

    def json_object(self, node: str, what: str) -> dict[str, Any]:
        """Standard output as a JSON object; HostError naming ``what`` when it is not one."""
        try:
            doc = json.loads(self.stdout)
        except ValueError as exc:
            raise HostError(node, f"{what} printed no JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise HostError(node, f"{what} printed no JSON object")
        return doc


@dataclass(frozen=True, slots=True)
class HostKey:
    """A host's public key as shown to the operator."""

    key_type: str
    fingerprint: str


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a public key (what ``ssh-keygen -lf`` prints)."""
    return str(key.fingerprint)


def command_line(argv: Sequence[str]) -> str:
    """An argument list as one POSIX shell command line, every argument quoted."""
    if not argv:
        raise ValueError("empty command")
    return shlex.join(argv)


class _PinnedKey(paramiko.MissingHostKeyPolicy):
    """Accept exactly the confirmed fingerprint; refuse unknown and changed keys."""

    def __init__(self, target: Target) -> None:
        self._target = target

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        got = fingerprint(key)
        if self._target.fingerprint is None:
            raise UnknownHostKey(self._target.node, key.get_name(), got)
        if got != self._target.fingerprint:
            raise HostKeyMismatch(self._target.node, self._target.fingerprint, got)


@dataclass(frozen=True, slots=True)
class _Endpoint:
    host: str
    port: int
    user: str | None
    key_files: tuple[str, ...]
    proxy_command: str | None


class Pool:
    """One SSH connection per node, opened on first use and reused by later calls.

    Thread-safe: fan-out runs one thread per host, and a host's connection is
    opened once even when several threads ask for it at the same time.
    """

    def __init__(
        self,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        command_timeout: float = COMMAND_TIMEOUT,
        ssh_config: Path | None = None,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        path = ssh_config if ssh_config is not None else Path.home() / ".ssh" / "config"
        self._config = paramiko.SSHConfig.from_path(str(path)) if path.is_file() else None
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _endpoint(self, target: Target) -> _Endpoint:
        """Node settings first, then ``~/.ssh/config`` for the host (or alias), then defaults."""
        try:  # a lookup may resolve the name (CanonicalizeHostname); Port may not be a number
            conf = self._config.lookup(target.host) if self._config else {}
            port = target.port or int(conf.get("port", 22))
        except Exception as exc:
            raise HostError(target.node, f"~/.ssh/config for {target.host!r}: {_why(exc)}") from exc
        key_files = [target.key_path] if target.key_path else []
        key_files += [str(Path(p).expanduser()) for p in conf.get("identityfile", [])]
        return _Endpoint(
            host=conf.get("hostname", target.host),
            port=port,
            user=target.user or conf.get("user"),
            key_files=tuple(key_files),
            proxy_command=conf.get("proxycommand"),
        )

    def host_key(self, target: Target) -> HostKey:
        """The key the host presents, without logging in (what ``ssh-keyscan`` shows)."""
        ep = self._endpoint(target)
        sock = self._socket(target, ep)
        transport = paramiko.Transport(sock)
        try:
            transport.start_client(timeout=self.connect_timeout)
            key = transport.get_remote_server_key()
            return HostKey(key.get_name(), fingerprint(key))
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(target.node, f"no SSH answer from {ep.host}:{ep.port}: {exc}") from exc
        finally:
            transport.close()

    def client(self, target: Target) -> paramiko.SSHClient:
        """The node's open connection, (re)connecting when there is none or it died."""
        with self._guard:
            lock = self._locks.setdefault(target.node, threading.Lock())
        with lock:
            client = self._clients.get(target.node)
            transport = client.get_transport() if client else None
            if client is not None and transport is not None and transport.is_active():
                return client
            if client is not None:
                client.close()
            client = self._connect(target)
            self._clients[target.node] = client
            return client

    def _socket(self, target: Target, ep: _Endpoint) -> socket.socket | paramiko.ProxyCommand:
        """The connection to the host; HostError for the node whatever stops it.

        The resolver raises more than OSError for a name it cannot take
        (UnicodeError from IDNA for ``a..b``, OverflowError for a port), and so
        does starting a ProxyCommand; a bad host is its node's error, never
        the caller's crash.
        """
        try:
            if ep.proxy_command:
                return paramiko.ProxyCommand(ep.proxy_command)
            return socket.create_connection((ep.host, ep.port), timeout=self.connect_timeout)
        except Exception as exc:
            raise HostError(target.node, f"cannot reach {ep.host}:{ep.port}: {_why(exc)}") from exc

    def _connect(self, target: Target) -> paramiko.SSHClient:
        ep = self._endpoint(target)
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_PinnedKey(target))
        try:
            client.connect(
                ep.host,
                port=ep.port,
                username=ep.user,
                key_filename=list(ep.key_files) or None,  # type: ignore[arg-type]  # a list is fine
                look_for_keys=not ep.key_files,
                allow_agent=True,
                timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout,
                sock=self._socket(target, ep),
            )
        except HostError:
            client.close()
            raise
        except paramiko.AuthenticationException as exc:
            client.close()
            raise HostError(
                target.node, f"SSH login as {ep.user or 'default user'} failed: {exc}"
            ) from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            client.close()
            raise HostError(target.node, f"SSH to {ep.host}:{ep.port} failed: {_why(exc)}") from exc
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE)
            transport.sock.settimeout(TRANSPORT_POLL)
        return client

    def run(
        self,
        target: Target,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> Result:
        """Run ``argv`` on the node and wait for it; raises HostError when it cannot run."""
        limit = self.command_timeout if timeout is None else timeout
        channel = self.open(target, argv, timeout=limit)
        try:
            if stdin is not None:
                channel.sendall(stdin)
            channel.shutdown_write()
            return _collect(channel, time.monotonic() + limit)
        except TimeoutError as exc:
            raise CommandTimeout(target.node, f"{argv[0]} ran past {limit:g} s") from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(target.node, f"{argv[0]}: connection lost: {_why(exc)}") from exc
        finally:
            channel.close()

    def run_ok(
        self,
        target: Target,
        argv: Sequence[str],
        what: str,
        *,
        stdin: bytes | None = None,
        timeout: float | None = None,
    ) -> Result:
        """:meth:`run`, raising HostError (``what`` failed: its stderr) on a non-zero exit."""
        res = self.run(target, argv, stdin=stdin, timeout=timeout)
        if res.rc != 0:
            why = res.stderr.decode(errors="replace").strip()[-200:]
            raise HostError(target.node, f"{what} failed: {why}")
        return res

    def pipe(
        self,
        source: Target,
        source_argv: Sequence[str],
        target: Target,
        target_argv: Sequence[str],
        *,
        header: bytes = b"",
        timeout: float,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, Result, Result]:
        """Run ``source_argv`` into ``target_argv``: ``header``, then the source's stdout.

        The stream goes through this machine, so the nodes need no access to
        each other. Returns the bytes moved and both results (the source's
        without its stdout); ``timeout`` bounds the whole transfer.
        ``progress`` is told the bytes moved so far after each block.
        """
        deadline = time.monotonic() + timeout
        moved = 0
        src = self.open(source, source_argv, timeout=timeout)
        try:
            dst = self.open(target, target_argv, timeout=timeout)
            try:
                dst.sendall(header)
                while block := src.recv(1 << 20):
                    dst.sendall(block)
                    moved += len(block)
                    if progress is not None:
                        progress(moved)
                    if time.monotonic() > deadline:
                        raise TimeoutError
                dst.shutdown_write()
                into = _collect(dst, deadline)
            except TimeoutError as exc:
                raise CommandTimeout(target.node, f"copy ran past {timeout:g} s") from exc
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise HostError(target.node, f"copy: connection lost: {_why(exc)}") from exc
            finally:
                dst.close()
            try:
                sent = _collect(src, deadline)
            except (TimeoutError, paramiko.SSHException, OSError, EOFError) as exc:
                raise HostError(source.node, f"copy: {_why(exc)}") from exc
        finally:
            src.close()
        return moved, sent, into

    def open(
        self, target: Target, argv: Sequence[str], *, timeout: float | None = None
    ) -> paramiko.Channel:
        """Start ``argv`` on the node and return its channel (for streams such as a socket)."""
        line = command_line(argv)
        try:
            transport = self.client(target).get_transport()
            if transport is None:
                raise paramiko.SSHException("connection closed")
            channel = transport.open_session(timeout=self.connect_timeout)
            channel.settimeout(self.command_timeout if timeout is None else timeout)
            channel.exec_command(line)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.drop(target.node)
            raise HostError(target.node, f"cannot start {argv[0]}: {_why(exc)}") from exc
        return channel

    def drop(self, node: str) -> None:
        """Close a node's pooled connection (the next call reconnects)."""
        with self._guard:
            client = self._clients.pop(node, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        """Close every pooled connection."""
        with self._guard:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


def _collect(channel: paramiko.Channel, deadline: float) -> Result:
    """Read stdout and stderr as they come until the command exits or the deadline passes."""
    out, err = bytearray(), bytearray()
    # The channel's fd is readable on stdout or stderr data, and for good after EOF. poll,
    # not select: with a connection per node a daemon's fds pass select's limit of 1,024.
    ready = select.poll()
    ready.register(channel.fileno(), select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        ready.poll(left * 1000.0)
        while channel.recv_ready():
            out += channel.recv(65536)
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        if channel.eof_received:
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError
            while chunk := channel.recv(65536):
                out += chunk
            while chunk := channel.recv_stderr(65536):
                err += chunk
            return Result(channel.recv_exit_status(), bytes(out), bytes(err))


def raise_open_files() -> int:
    """Raise this process's soft limit of open files to its hard limit; the limit now.

    A daemon holds a connection per node and a pipe per command in flight:
    a thousand nodes pass the soft limit many systems start a service with
    (1,024), as Go's runtime and nginx know.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and hard != resource.RLIM_INFINITY:  # the kernel refuses infinite ones
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def fan_out(
    targets: Iterable[Target],
    call: Callable[[Target], T],
    *,
    workers: int = 16,
) -> dict[str, T | HostError]:
    """``call`` on every target at once; each node gets its result or its HostError.

    One dead host never hides the others: its error is its answer, and the
    rest finish normally.
    """
    items = list(targets)
    if not items:
        return {}

    def one(target: Target) -> T | HostError:
        try:
            return call(target)
        except HostError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return dict(zip((t.node for t in items), pool.map(one, items), strict=True))
