"""Long-running host agents: the daemon's frequent requests to a node over one SSH channel.

The daemon looks at every node every heartbeat (:mod:`gctl.daemon.watch`).
Running the host agent (:mod:`gctl.hosts.agent`) afresh for each look costs
the host an SSH session and a ``python3`` start, tens of milliseconds of CPU,
and the daemon a channel's set-up; at a thousand nodes that is most of the
work there is. A link keeps one agent running per node, in its ``serve``
mode, and sends it a JSON line per request, reading one JSON line back.

The agent ends when its channel closes (the daemon stopped, the connection
was lost). A request that fails, or gets no answer in time, closes the link,
so a late answer can never be taken for the next request's; the next request
starts a new agent. An answer must carry its request's id.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import paramiko

from gctl.hosts.ssh import CommandTimeout, HostError, Pool, Target

_LINE_LIMIT = 64 << 20
"""The longest answer taken, in bytes: an agent sending more is broken."""


class AgentLink:
    """One node's agent in ``serve`` mode, started on the first request; one request at a time."""

    def __init__(self, pool: Pool, target: Target, argv: Sequence[str]) -> None:
        self.target = target
        self._pool = pool
        self._argv = list(argv)
        self._channel: paramiko.Channel | None = None
        self._buffer = bytearray()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def ask(self, mode: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The answer to one ``mode`` request; HostError when none comes within ``timeout`` s."""
        node, what = self.target.node, f"gctl agent {mode}"
        with self._lock:
            ident = next(self._ids)
            line = json.dumps({"id": ident, "mode": mode, "request": request}).encode() + b"\n"
            try:
                if self._channel is None:
                    self._channel = self._pool.open(self.target, self._argv, timeout=timeout)
                    self._buffer.clear()
                self._channel.settimeout(timeout)
                self._channel.sendall(line)
                got = json.loads(self._read_line(time.monotonic() + timeout))
            except TimeoutError as exc:
                self._close()
                raise CommandTimeout(node, f"{what} gave no answer within {timeout:g} s") from exc
            except HostError:
                self._close()
                raise
            except (paramiko.SSHException, OSError, EOFError, ValueError) as exc:
                self._close()
                raise HostError(node, f"{what}: agent link lost: {self._why(exc)}") from exc
            if not isinstance(got, dict) or got.get("id") != ident:
                self._close()
                raise HostError(node, f"{what}: the agent answered another request")
            if "error" in got:
                raise HostError(node, f"{what} failed: {str(got['error'])[-200:]}")
            answer = got.get("answer")
            if not isinstance(answer, dict):
                raise HostError(node, f"{what}: the agent's answer is not a JSON object")
            return answer

    def close(self) -> None:
        """End the agent (its stdin closes); for a link no longer used.

        Without waiting for a request in flight: it fails at once instead.
        """
        channel = self._channel
        if channel is not None:
            channel.close()

    def _close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self._buffer.clear()

    def _read_line(self, deadline: float) -> bytes:
        """The next line the agent wrote, without its newline."""
        channel = self._channel
        assert channel is not None
        while (end := self._buffer.find(b"\n")) < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if len(self._buffer) > _LINE_LIMIT:
                raise ValueError(f"an answer longer than {_LINE_LIMIT} bytes")
            channel.settimeout(left)
            chunk = channel.recv(1 << 16)
            if not chunk:
                raise EOFError("the agent ended")
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def _why(self, exc: BaseException) -> str:
        """The error, and the end of what the agent wrote on stderr, if anything."""
        text = str(exc) or type(exc).__name__
        channel = self._channel
        if channel is not None and channel.recv_stderr_ready():
            tail = channel.recv_stderr(4096).decode(errors="replace").strip()[-200:]
            text = f"{text}: {tail}" if tail else text
        return text


class AgentLinks:
    """Every node's :class:`AgentLink`: made on first use, replaced when the address changes."""

    def __init__(self, pool: Pool, argv: Sequence[str]) -> None:
        self._pool = pool
        self._argv = list(argv)
        self._links: dict[str, AgentLink] = {}
        self._guard = threading.Lock()

    def ask(
        self, target: Target, mode: str, request: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """:meth:`AgentLink.ask` of the node's link."""
        with self._guard:
            link = self._links.get(target.node)
            if link is None or link.target != target:
                if link is not None:
                    link.close()
                link = self._links[target.node] = AgentLink(self._pool, target, self._argv)
        return link.ask(mode, request, timeout)

    def forget(self, node: str) -> None:
        """End a node's agent (the node left the store)."""
        with self._guard:
            link = self._links.pop(node, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        """End every node's agent."""
        with self._guard:
            links, self._links = list(self._links.values()), {}
        for link in links:
            link.close()
