"""A host's Docker engine, driven with docker-py through the node's pooled SSH connection.

Each HTTP connection to the engine is an SSH channel running ``docker system
dial-stdio`` on the host (what docker-py's own ``ssh://`` transport does),
but opened on gctl's pooled, host-key-pinned connection instead of a second
login. Channels are kept by urllib3's pool, so after the first call an API
request is one round trip: a pause or unpause costs milliseconds, where
running the ``docker`` CLI over SSH costs a process start on the host for
every call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
import paramiko
import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
from docker.constants import MINIMUM_DOCKER_API_VERSION
from docker.types import DeviceRequest, HostConfig

from gctl.hosts.cache_agent import LABEL_DATASETS
from gctl.hosts.emulated import (
    EMULATED_GPU_MEM_ENV,
    EMULATED_UTIL_ENV,
    GPU_DIR_ENV,
    GPU_DIR_IN_CONTAINER,
    declared_gpu_mem,
    declared_util,
)
from gctl.hosts.mounts import Mount
from gctl.hosts.ssh import HostError, Pool, Target

LABEL_STORE = "gctl.store"
"""The id of the store a container belongs to: gctl never touches another store's containers."""
LABEL_EPOCH = "gctl.epoch"
"""The lease epoch of the daemon that started the container."""
LABEL_JOB = "gctl.job"
LABEL_ATTEMPT = "gctl.attempt"
LABEL_NODE = "gctl.node"
LABEL_GPUS = "gctl.gpus"
LABEL_GPU_UUIDS = "gctl.gpu-uuids"
LABEL_EMULATED = "gctl.emulated"
LABEL_GPU_MEM = "gctl.gpu-mem-mb"
LABEL_EMULATED_UTIL = "gctl.emulated-util"
LABEL_EMULATED_GPU_MEM = "gctl.emulated-gpu-mem-mb"
JOB_DIR_IN_CONTAINER = "/gctl"
"""Where the per-job host directory (progress, checkpoints) appears inside the container."""

_BASE_URL = "tcp://docker-engine.gctl.invalid:2375"
"""A placeholder for docker-py's constructor; replaced by :data:`_SSH_BASE_URL`."""
_SSH_BASE_URL = "http+docker://ssh"
"""The base URL docker-py gives its own SSH transport; requests to it go to our adapter."""


def _number(text: str) -> int | None:
    """A label's non-negative integer (ASCII digits only), or None."""
    return int(text) if text.isascii() and text.isdigit() else None


def container_name(store_id: str, job_id: int, attempt: int, node: str) -> str:
    """A job attempt's container on a node: store, job, attempt and node, so none ever clashes.

    Names are unique per engine, and two stores, or several nodes (a job
    spread over them among others), may share one engine.
    """
    return f"gctl-{store_id}-{job_id}-{attempt}-{node}"


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """Everything needed to start one job's container on one node."""

    job_id: int
    attempt: int
    node: str
    store_id: str
    image: str
    command: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    job_dir: str
    gpu_models: tuple[str, ...] = ()
    """Each GPU's model (``V100``, ``K80``, ...), in the order of ``gpu_indices``."""
    emulated: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    datasets: tuple[str, ...] = ()
    """The dataset copies it mounts (cache keys): a label, so no fill evicts them meanwhile."""
    cpuset: str | None = None
    cpuset_mems: str | None = None
    """The NUMA nodes whose memory the container may use (those of its GPUs; None: any)."""
    gpu_mem_mb: int | None = None
    memory_limit_mb: int | None = None
    emulated_dir: str | None = None
    """The node's emulated-GPU directory (host path), shared by the jobs on emulated GPUs."""
    epoch: int = 0
    """The lease epoch of the daemon starting the container (a label, for the record)."""
    user: str | None = None
    """The ``uid:gid`` the job's processes run as (None: the image's own user)."""
    network: str = "host"
    """The container's network mode."""
    pids_limit: int | None = None
    """The most processes (and threads) the container may have."""

    @property
    def name(self) -> str:
        """The container name: :func:`container_name`."""
        return container_name(self.store_id, self.job_id, self.attempt, self.node)

    def environment(self) -> dict[str, str]:
        """The job's own env, then what gctl tells every job (gctl's keys win)."""
        gpus = ",".join(map(str, self.gpu_indices))
        env = dict(self.env)
        env.update(
            {
                "GCTL_JOB_ID": str(self.job_id),
                "GCTL_ATTEMPT": str(self.attempt),
                "GCTL_NODE": self.node,
                "GCTL_JOB_DIR": JOB_DIR_IN_CONTAINER,
                "GCTL_GPUS": str(len(self.gpu_indices)),
                "GCTL_GPU_INDICES": gpus,
                "GCTL_GPU_UUIDS": ",".join(self.gpu_uuids),
                "GCTL_GPU_MODELS": ",".join(self.gpu_models),
            }
        )
        if self.gpu_mem_mb is not None:
            env["GCTL_GPU_MEM_MB"] = str(self.gpu_mem_mb)
        if self.emulated:
            env["GCTL_EMULATED_GPUS"] = "1"
            if self.emulated_dir:
                env[GPU_DIR_ENV] = GPU_DIR_IN_CONTAINER
        return env

    def labels(self) -> dict[str, str]:
        """Labels that let gctl find and recognise its containers on a host."""
        labels = {
            LABEL_STORE: self.store_id,
            LABEL_EPOCH: str(self.epoch),
            LABEL_JOB: str(self.job_id),
            LABEL_ATTEMPT: str(self.attempt),
            LABEL_NODE: self.node,
            LABEL_GPUS: ",".join(map(str, self.gpu_indices)),
            LABEL_GPU_UUIDS: ",".join(self.gpu_uuids),
            LABEL_EMULATED: "1" if self.emulated else "0",
        }
        if self.gpu_mem_mb is not None:
            labels[LABEL_GPU_MEM] = str(self.gpu_mem_mb)
        if self.datasets:
            labels[LABEL_DATASETS] = ",".join(self.datasets)
        if self.emulated and EMULATED_UTIL_ENV in self.env:
            labels[LABEL_EMULATED_UTIL] = self.env[EMULATED_UTIL_ENV]
        if self.emulated and EMULATED_GPU_MEM_ENV in self.env:
            labels[LABEL_EMULATED_GPU_MEM] = self.env[EMULATED_GPU_MEM_ENV]
        return labels


@dataclass(frozen=True, slots=True)
class ContainerState:
    """Where a container stands, from ``docker inspect``."""

    id: str
    name: str
    status: str
    running: bool
    paused: bool
    exit_code: int | None
    oom_killed: bool
    error: str | None
    labels: Mapping[str, str]
    started_at: str | None = None
    """When the container last started, as Docker writes it (RFC 3339); None when not inspected."""
    finished_at: str | None = None
    """When it last ended (RFC 3339), for an ended container."""

    @property
    def job_id(self) -> int | None:
        """The gctl job the container runs, if it is one of gctl's."""
        return _number(self.labels.get(LABEL_JOB, ""))

    @property
    def attempt(self) -> int | None:
        """The job's container generation this container belongs to."""
        return _number(self.labels.get(LABEL_ATTEMPT, ""))

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """GPU indices the container was given."""
        found = (_number(p) for p in self.labels.get(LABEL_GPUS, "").split(","))
        return tuple(i for i in found if i is not None)

    @property
    def emulated_util(self) -> float:
        """Percent of one emulated GPU this job keeps busy: as declared at submit, else 100."""
        try:
            return declared_util(self.labels.get(LABEL_EMULATED_UTIL, "100"))
        except ValueError:
            return 100.0

    @property
    def emulated_gpu_mem_mb(self) -> int | None:
        """MiB this job allocates on each emulated GPU, as declared at submit (None: not)."""
        try:
            return declared_gpu_mem(self.labels.get(LABEL_EMULATED_GPU_MEM, ""))
        except ValueError:
            return None

    @property
    def gpu_mem_limit_mb(self) -> int | None:
        """The job's ``--gpu-mem``: the most MiB it may use on each GPU (None: no limit)."""
        return _number(self.labels.get(LABEL_GPU_MEM, ""))


# Beyond a node's pooled channels (max_channels), urllib3 opens one more for a request
# and closes it after, warning "Connection pool is full, discarding connection" each
# time: a routine event at many jobs per node, not something for the daemon's journal.
logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


class _ChannelConnection(urllib3.connection.HTTPConnection):
    """An HTTP connection whose socket is an SSH channel running ``docker system dial-stdio``."""

    def __init__(self, engine: Engine, timeout: Any) -> None:
        super().__init__("localhost", timeout=timeout)
        self._engine = engine

    def connect(self) -> None:
        self.sock = self._engine.dial()


class _ChannelPool(urllib3.connectionpool.HTTPConnectionPool):
    def __init__(self, engine: Engine, timeout: float, maxsize: int) -> None:
        super().__init__("localhost", timeout=timeout, maxsize=maxsize)
        self._engine = engine

    def _new_conn(self) -> _ChannelConnection:
        return _ChannelConnection(self._engine, self.timeout.connect_timeout)


class _ChannelAdapter(requests.adapters.HTTPAdapter):
    """Sends every request of a docker-py client through one node's SSH channels."""

    def __init__(self, pool: _ChannelPool) -> None:
        super().__init__()
        self._channels = pool

    def get_connection_with_tls_context(
        self, request: Any, verify: Any, proxies: Any = None, cert: Any = None
    ) -> _ChannelPool:
        return self._channels

    def request_url(self, request: Any, proxies: Any) -> str:
        return str(request.path_url)

    def close(self) -> None:
        super().close()
        self._channels.close()

    def renew(self, pool: _ChannelPool) -> None:
        """Drop every pooled channel (they may be dead) and go on with ``pool``."""
        old, self._channels = self._channels, pool
        old.close()


class Engine:
    """One node's Docker engine: start, pause, stop and inspect one store's job containers.

    Only containers labelled with ``store_id`` are listed as the store's; a
    container of another store on the same engine is never seen, so never
    touched.
    """

    def __init__(
        self,
        ssh: Pool,
        target: Target,
        store_id: str,
        *,
        docker_host: str | None = None,
        timeout: float = 60.0,
        max_channels: int = 4,
    ) -> None:
        self.ssh = ssh
        self.target = target
        self.store_id = store_id
        self._dial = ["docker", *(["-H", docker_host] if docker_host else []), "system"]
        self._dial.append("dial-stdio")
        self._timeout = timeout
        self._max_channels = max_channels
        self._adapter = _ChannelAdapter(_ChannelPool(self, timeout, max_channels))
        self._client: docker.APIClient | None = None
        self._client_lock = threading.Lock()

    @property
    def node(self) -> str:
        """The node this engine belongs to."""
        return self.target.node

    def dial(self) -> paramiko.Channel:
        """A fresh channel to the engine's API socket (used by the HTTP pool)."""
        return self.ssh.open(self.target, self._dial, timeout=self._timeout)

    def _new_client(self, version: str) -> docker.APIClient:
        client = docker.APIClient(base_url=_BASE_URL, version=version, timeout=int(self._timeout))
        client.trust_env = False  # no HTTP proxy from the environment: nothing leaves SSH
        # docker-py finds the socket under a streamed response (logs, attach) by
        # its base URL; this one makes it look for a paramiko channel, which is
        # what carries every request here.
        client.base_url = _SSH_BASE_URL
        client.mount(_SSH_BASE_URL, self._adapter)
        return client

    @property
    def api(self) -> docker.APIClient:
        """The docker-py client, at the API version the engine speaks (asked once)."""
        with self._client_lock:  # calls from parallel threads ask once
            if self._client is None:
                probe = self._new_client(MINIMUM_DOCKER_API_VERSION)
                version = self._call(
                    lambda: probe.version(api_version=False)["ApiVersion"], "version"
                )
                self._client = self._new_client(str(version))
            return self._client

    def _call(self, fn: Any, what: str) -> Any:
        """Run one docker-py call; its failures become one-line HostErrors."""
        try:
            return fn()
        except docker.errors.ImageNotFound as exc:
            why = f"{what}: {exc.explanation or 'no such image'}"
            raise HostError(self.node, why, permanent=True) from exc
        except docker.errors.NotFound as exc:
            raise HostError(self.node, f"{what}: {exc.explanation or 'not found'}") from exc
        except docker.errors.APIError as exc:
            why = f"{what}: {exc.explanation or exc}"
            permanent = refused_for_good(exc)
            raise HostError(self.node, " ".join(why.split()), permanent=permanent) from exc
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            # The next call dials afresh: the SSH connection under these channels may be gone.
            self._adapter.renew(_ChannelPool(self, self._timeout, self._max_channels))
            raise HostError(self.node, f"{what}: Docker engine not reachable: {exc}") from exc

    def info(self) -> dict[str, Any]:
        """The engine's ``docker info`` (also a liveness check)."""
        return dict(self._call(lambda: self.api.info(), "docker info"))

    def start(self, spec: ContainerSpec) -> str:
        """Create and start a job's container; its id. One that cannot start is removed.

        The attempt's job directory, which the caller made
        (:mod:`gctl.hosts.agent`), is mounted at ``/gctl``. Real GPUs are
        requested by UUID from the NVIDIA runtime; emulated GPUs get no
        device, only the same environment and labels. Two round trips:
        create, start.

        Idempotent: when this run of the job (same name, same job label)
        already has a container, e.g. started by a daemon that died before
        recording it, that container's id is returned (started, if it never
        was) and nothing starts twice.
        """
        api = self.api
        config = host_config(spec, api.api_version)

        def create() -> str | None:
            try:
                created = api.create_container(
                    spec.image,
                    command=list(spec.command),
                    name=spec.name,
                    environment=spec.environment(),
                    labels=spec.labels(),
                    host_config=config,
                    user=spec.user or "",
                    use_config_proxy=False,
                )
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # the name is taken: this run exists already
                    return None
                raise
            return str(created["Id"])

        cid = self._call(create, f"create {spec.name}")
        if cid is None:
            found = self._existing(spec)
            if found.status != "created":
                return found.id
            cid = found.id
        try:
            self._call(lambda: api.start(cid), f"start {spec.name}")
        except HostError:
            self._call(lambda: api.remove_container(cid, force=True), f"remove {spec.name}")
            raise
        return str(cid)

    def _existing(self, spec: ContainerSpec) -> ContainerState:
        """The container holding ``spec``'s name, which must be the same store's and job's."""
        found = self.state(spec.name)
        if found.job_id != spec.job_id or found.labels.get(LABEL_STORE) != self.store_id:
            raise HostError(self.node, f"a container named {spec.name} is not job {spec.job_id}'s")
        return found

    def pause(self, cid: str) -> None:
        """Freeze the container's processes (time slicing); GPU memory stays allocated."""
        self._call(lambda: self.api.pause(cid), "pause")

    def unpause(self, cid: str) -> None:
        """Thaw a paused container."""
        self._call(lambda: self.api.unpause(cid), "unpause")

    def stop(self, cid: str, grace: int = 10) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        self._call(lambda: self.api.stop(cid, timeout=grace), "stop")

    def kill(self, cid: str, signal: str = "KILL") -> None:
        """Send a signal to the container's main process."""
        self._call(lambda: self.api.kill(cid, signal=signal), f"kill -{signal}")

    def remove(self, cid: str) -> None:
        """Remove a container, stopping it first if it still runs."""
        self._call(lambda: self.api.remove_container(cid, force=True), "remove")

    def state(self, cid: str) -> ContainerState:
        """Status, exit code and OOM kill of one container."""
        return _state(self._call(lambda: self.api.inspect_container(cid), "inspect"))

    def wait(self, cid: str, timeout: int) -> int:
        """Block until the container exits; its exit code."""
        got = self._call(lambda: self.api.wait(cid, timeout=timeout), "wait")
        return int(got["StatusCode"])

    def logs(self, cid: str, *, follow: bool = False, tail: int | None = None) -> Iterator[bytes]:
        """The container's output (stdout and stderr), followed while it runs if asked.

        Left before its end (Ctrl-C on a follow), the docker-py stream is not
        closed here: it cannot cancel a stream read over SSH and raises
        saying so; its channel closes with the engine instead.
        """
        stream = self._call(
            lambda: self.api.logs(
                cid, stream=True, follow=follow, tail="all" if tail is None else tail
            ),
            "logs",
        )
        try:
            for chunk in stream:  # noqa: UP028 (yield from would hand our close to docker-py)
                yield chunk
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise HostError(self.node, f"logs: Docker engine not reachable: {exc}") from exc

    def owned(self, job_id: int | None = None) -> list[ContainerState]:
        """The store's containers of this node (running or not), or only one job's.

        By their labels: an engine several nodes share lists each node's own.
        """
        labels = owned_labels(self.store_id, self.node, job_id)
        found = self._call(lambda: self.api.containers(all=True, filters={"label": labels}), "list")
        return [_listed(c) or self.state(str(c["Id"])) for c in found]

    def close(self) -> None:
        """Close the engine's channels (the SSH connection stays pooled)."""
        self._adapter.close()


_PROCESS_FAILED = "unable to start container process"
"""How the OCI runtime begins when the container's command itself cannot start."""
_NEVER_RUNS = ("executable file not found", "no such file or directory", "permission denied")
"""Why such a command can never start (the engine's own errors may say the same words)."""


def refused_for_good(exc: docker.errors.APIError) -> bool:
    """Whether the engine refused for good: a bad spec (400) or a command that cannot run."""
    text = str(exc.explanation or "").lower()
    if exc.status_code == 400:
        return True
    return _PROCESS_FAILED in text and any(t in text for t in _NEVER_RUNS)


def host_config(spec: ContainerSpec, api_version: str) -> dict[str, Any]:
    """The Docker host config of a job container: mounts, GPUs by UUID, CPUs, the sandbox.

    Real GPUs are a device request to the NVIDIA runtime naming each GPU's
    UUID; emulated GPUs request no device. The sandbox: never privileged, no
    capability added, no privilege gained through setuid programs
    (``no-new-privileges``), the site's network mode and limits.
    """
    binds: dict[str, Mapping[str, str]] = {
        m.src: {"bind": m.dst, "mode": "ro" if m.read_only else "rw"} for m in spec.mounts
    }
    binds[spec.job_dir] = {"bind": JOB_DIR_IN_CONTAINER, "mode": "rw"}
    if spec.emulated and spec.emulated_dir:  # Docker creates a missing bind source
        binds[spec.emulated_dir] = {"bind": GPU_DIR_IN_CONTAINER, "mode": "rw"}
    devices = (
        []
        if spec.emulated
        else [
            DeviceRequest(driver="nvidia", device_ids=list(spec.gpu_uuids), capabilities=[["gpu"]])
        ]
    )
    return dict(
        HostConfig(
            version=api_version,
            binds=binds,
            device_requests=devices,
            cpuset_cpus=spec.cpuset,
            cpuset_mems=spec.cpuset_mems,
            network_mode=spec.network,
            mem_limit=f"{spec.memory_limit_mb}m" if spec.memory_limit_mb else None,
            pids_limit=spec.pids_limit,
            privileged=False,
            security_opt=["no-new-privileges:true"],
        )
    )


def owned_labels(store_id: str, node: str, job_id: int | None = None) -> list[str]:
    """The label filters that list a store's containers of one node (or of one of its jobs)."""
    job = LABEL_JOB if job_id is None else f"{LABEL_JOB}={job_id}"
    return [f"{LABEL_STORE}={store_id}", f"{LABEL_NODE}={node}", job]


def listed_states(
    found: list[Mapping[str, Any]], inspected: Mapping[str, Mapping[str, Any]]
) -> list[ContainerState]:
    """Containers' states from the engine's list, and the inspection of those that ended.

    As :meth:`Engine.owned` reads them, from a listing made on the host
    (:func:`gctl.hosts.agent.list_containers`); an ended container not
    inspected (removed meanwhile) is left out.
    """
    out = []
    for entry in found:
        state = _listed(entry)
        info = inspected.get(str(entry["Id"]))
        if state is None and info is not None:
            state = _state(info)
        if state is not None:
            out.append(state)
    return out


def _listed(entry: Mapping[str, Any]) -> ContainerState | None:
    """A container's state from the engine's list, or None when only inspect tells it all.

    The list has no exit code or OOM kill, so an ended container is inspected.
    """
    status = str(entry.get("State", "unknown"))
    if status in ("exited", "dead"):
        return None
    names = entry.get("Names") or ["/"]
    return ContainerState(
        id=str(entry["Id"]),
        name=str(names[0]).lstrip("/"),
        status=status,
        running=status in ("running", "paused", "restarting"),
        paused=status == "paused",
        exit_code=None,
        oom_killed=False,
        error=None,
        labels=dict(entry.get("Labels") or {}),
    )


def _state(info: Mapping[str, Any]) -> ContainerState:
    st = info.get("State", {})
    status = str(st.get("Status", "unknown"))
    done = status in ("exited", "dead")
    return ContainerState(
        id=str(info["Id"]),
        name=str(info.get("Name", "")).lstrip("/"),
        status=status,
        running=bool(st.get("Running")),
        paused=bool(st.get("Paused")),
        exit_code=int(st["ExitCode"]) if done and st.get("ExitCode") is not None else None,
        oom_killed=bool(st.get("OOMKilled")),
        error=st.get("Error") or None,
        labels=dict(info.get("Config", {}).get("Labels") or {}),
        started_at=st.get("StartedAt") or None,
        finished_at=st.get("FinishedAt") if done else None,
    )
