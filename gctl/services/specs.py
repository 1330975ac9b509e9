"""Job specs as users write them: flag values and batch files, checked field by field.

Every check raises :class:`SpecError` naming the field, so ``gctl submit``
says exactly what is wrong in one line. Text (command arguments, env
values, names) is kept byte for byte; nothing here is ever given to a shell.
Sizes and numbers are held to :mod:`gctl.limits`, whatever the store.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gctl.hosts.emulated import (
    EMULATED_GPU_MEM_ENV,
    EMULATED_UTIL_ENV,
    GPU_DIR_IN_CONTAINER,
    declared_gpu_mem,
    declared_util,
)
from gctl.hosts.mounts import Mount
from gctl.limits import (
    BATCH_BYTES_MAX,
    GPU_MEM_MAX_MB,
    GPUS_MAX,
    NAME_MAX,
    SAFE_NAME,
    SPEC_BYTES_MAX,
    SPEC_ITEMS_MAX,
    TEXT_MAX,
    LimitError,
    check_int,
    check_text,
    shown,
)
from gctl.slurmtime import TimeFormatError, parse_time_limit

PRIORITIES = ("low", "normal", "high")
CLASSES = ("production", "opportunistic")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MEM = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B?|B)?", re.IGNORECASE)
_ELASTIC = re.compile(r"([0-9]{1,9}):([0-9]{1,9})")
_MEM_MB = {"": 1 / (1 << 20), "b": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}
RESERVED_TARGETS = ("/gctl", GPU_DIR_IN_CONTAINER)
"""Container paths gctl mounts itself: the job directory (``engine.JOB_DIR_IN_CONTAINER``,
written out so that checking a spec does not load docker-py) and the emulated-GPU files."""


class SpecError(ValueError):
    """A job spec value that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A checked job spec, ready to store."""

    image: str
    command: tuple[str, ...]
    gpus: int
    name: str = ""
    priority: str = "normal"
    job_class: str = "production"
    elastic: tuple[int, int] | None = None
    gpu_mem_mb: int | None = None
    datasets: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    profile: str | None = None
    time_limit: float | None = None
    """Seconds of running allowed (``--time``); None: none asked, or UNLIMITED if ``time_given``."""
    time_given: bool = False
    wait_for_nodes: bool = False
    """Queue it even when it asks for more GPUs than the registered nodes have."""


def _text(value: str, what: str, limit: int = TEXT_MAX) -> str:
    """``value`` unchanged if a container can be given it: no NUL, UTF-8, within ``limit``."""
    try:
        return check_text(value, what, limit=limit)
    except LimitError as exc:
        raise SpecError(str(exc)) from None


def _no_control(value: str, what: str, limit: int = NAME_MAX) -> str:
    """Like :func:`_text`, and without control characters (C0, DEL, C1)."""
    _text(value, what, limit)
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise SpecError(f"{what}: control characters are not allowed")
    return value


def check_image(image: str) -> str:
    """A container image reference (no spaces or shell characters)."""
    if len(image) > TEXT_MAX or not _IMAGE.fullmatch(image):
        raise SpecError(f"--image {shown(image)}: not a valid image reference")
    return image


def check_gpus(gpus: int) -> int:
    """A GPU count from 1 to :data:`~gctl.limits.GPUS_MAX`."""
    try:
        return check_int(gpus, "--gpus", high=GPUS_MAX)
    except LimitError as exc:
        raise SpecError(str(exc)) from None


def check_choice(value: str, choices: tuple[str, ...], flag: str) -> str:
    """One of ``choices`` (case-insensitive), returned in lower case."""
    low = value.lower() if isinstance(value, str) else value
    if low not in choices:
        raise SpecError(f"{flag} {value!r}: choose one of {', '.join(choices)}")
    return str(low)


def parse_size_mb(text: str, flag: str, high_mb: int) -> int:
    """A size such as ``8G``, ``16GiB`` or ``512M`` (no unit: MiB) in MiB, 1M to ``high_mb``."""
    m = _MEM.fullmatch(text.strip()) if isinstance(text, str) and len(text) <= 64 else None
    if m is None:
        raise SpecError(f"{flag} {shown(text)}: expected a size such as 8G, 16GiB or 512M")
    unit = (m.group(2) or "m")[0].lower()
    mb = round(min(float(m.group(1)), 1e18) * _MEM_MB[unit])  # 1e18: no round(inf)
    if not 1 <= mb <= high_mb:
        raise SpecError(f"{flag} {shown(text)}: must be from 1M to {high_mb >> 20}T")
    return mb


def parse_gpu_mem(text: str) -> int:
    """GPU memory such as ``8G``, ``16GiB`` or ``512M``, in MiB."""
    return parse_size_mb(text, "--gpu-mem", GPU_MEM_MAX_MB)


def parse_time(text: str) -> float | None:
    """``--time`` in Slurm's notation as seconds (None: UNLIMITED)."""
    try:
        return parse_time_limit(text)
    except TimeFormatError as exc:
        raise SpecError(str(exc)) from None


def parse_elastic(text: str, gpus: int) -> tuple[int, int]:
    """``MIN:MAX`` GPUs for an elastic job; the range must contain ``--gpus``."""
    m = _ELASTIC.fullmatch(text)
    if m is None:
        raise SpecError(f"--elastic {shown(text)}: expected MIN:MAX, e.g. 1:4")
    lo, hi = int(m.group(1)), int(m.group(2))
    if not 1 <= lo <= gpus <= hi <= GPUS_MAX:
        raise SpecError(
            f"--elastic {shown(text)}: need 1 <= MIN <= --gpus ({gpus}) <= MAX <= {GPUS_MAX}"
        )
    return lo, hi


def check_env_key(key: str, what: str) -> str:
    """An environment variable's name: letters, digits and ``_``, not starting with a digit."""
    if len(key) > NAME_MAX or not _ENV_KEY.fullmatch(key):
        raise SpecError(f"{what}: expected KEY=VALUE with KEY a shell-style name")
    return key


def parse_env(text: str) -> tuple[str, str]:
    """``KEY=VALUE``; the value is kept exactly as typed."""
    key, sep, value = text.partition("=")
    what = f"--env {shown(text)}"
    if not sep:
        raise SpecError(f"{what}: expected KEY=VALUE with KEY a shell-style name")
    check_env_key(key, what)
    _text(value, what, SPEC_BYTES_MAX)
    check = {EMULATED_UTIL_ENV: declared_util, EMULATED_GPU_MEM_ENV: declared_gpu_mem}.get(key)
    if check is not None:
        try:
            check(value)
        except ValueError as exc:
            raise SpecError(f"{what}: {exc}") from None
    return key, value


def parse_mount(text: str) -> Mount:
    """``SRC:DST[:ro|rw]`` with absolute paths; DST is not ``/`` nor gctl's own (reserved)."""
    what = f"--mount {shown(text)}"
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise SpecError(f"{what}: expected SRC:DST or SRC:DST:ro")
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise SpecError(f"{what}: mode must be ro or rw")
    src, dst = parts[0], parts[1]
    for path in (src, dst):
        _no_control(path, what, TEXT_MAX)
        if not path.startswith("/"):
            raise SpecError(f"{what}: {shown(path)} is not an absolute path")
    _target(dst, what)
    return Mount(src, dst, mode == "ro")


def _target(dst: str, what: str) -> str:
    """A mount point in the container as Docker resolves it: not ``/``, nor gctl's own."""
    target = _in_container(dst)
    if target == "/":
        raise SpecError(f"{what}: cannot mount over the container's root /")
    for reserved in RESERVED_TARGETS:
        if target == reserved or target.startswith(reserved + "/"):
            raise SpecError(f"{what}: {reserved} is reserved by gctl in the container")
    return target


DATASET_MOUNT = "/datasets"
"""Where a job finds a dataset it gave no mount point for: ``/datasets/NAME``."""


def dataset_entry(entry: str) -> tuple[str, str]:
    """A stored ``--dataset`` entry, ``NAME[:/mount]``: its name and mount point."""
    name, sep, mount = entry.partition(":")
    return name, mount if sep else f"{DATASET_MOUNT}/{name}"


def parse_dataset(text: str) -> str:
    """``NAME[:/mount]``: a dataset name, and where the job finds it (absolute, not reserved)."""
    what = f"--dataset {shown(text)}"
    _no_control(text, what, TEXT_MAX)
    name, sep, mount = text.partition(":")
    if not SAFE_NAME.fullmatch(name):
        raise SpecError(f"{what}: expected NAME or NAME:/mount/point")
    if not sep:
        return name
    if not mount.startswith("/"):
        raise SpecError(f"{what}: the mount point must be an absolute path")
    return f"{name}:{_target(mount, what)}"


def _in_container(dst: str) -> str:
    """A mount target as Docker resolves it: ``//gctl/``, ``/x/../gctl`` are ``/gctl``."""
    return posixpath.normpath("/" + dst.lstrip("/"))


def _bounded(items: Sequence[str], what: str, nbytes: int = 0) -> None:
    """At most :data:`~gctl.limits.SPEC_ITEMS_MAX` items and ``SPEC_BYTES_MAX`` bytes in all."""
    if len(items) > SPEC_ITEMS_MAX:
        raise SpecError(f"{what}: {len(items):,} items, more than the {SPEC_ITEMS_MAX:,} allowed")
    if nbytes > SPEC_BYTES_MAX:
        raise SpecError(f"{what}: {nbytes:,} bytes, more than the {SPEC_BYTES_MAX:,} allowed")


def check_command(command: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A command to exec: a non-empty program, then arguments; each kept byte for byte."""
    if not command:
        raise SpecError("command: give the command to run after --")
    if not command[0]:
        raise SpecError("command: the program to run (the first argument) is empty")
    _bounded(command, "command")
    argv = tuple(
        _text(arg, f"command: argument {i}", SPEC_BYTES_MAX) for i, arg in enumerate(command, 1)
    )
    _bounded(argv, "command", sum(len(arg.encode()) + 1 for arg in argv))
    return argv


def check_mounts(mounts: list[str] | tuple[str, ...]) -> tuple[Mount, ...]:
    """``--mount`` values, no two onto the same target (Docker refuses duplicate mount points)."""
    _bounded(mounts, "--mount")
    parsed = tuple(parse_mount(m) for m in mounts)
    seen: set[str] = set()
    for mount in parsed:
        target = _in_container(mount.dst)
        if target in seen:
            raise SpecError(f"--mount: two mounts onto {target}")
        seen.add(target)
    return parsed


def check_env(env: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--env`` values as a mapping (a later value of a key wins), within the spec's limits."""
    _bounded(env, "--env")
    parsed = dict(parse_env(e) for e in env)
    _bounded(env, "--env", sum(len(k.encode()) + len(v.encode()) + 2 for k, v in parsed.items()))
    return parsed


def default_name(command: tuple[str, ...]) -> str:
    """A job's name when none is given: its program's base name, cut to a name's length."""
    return command[0].rsplit("/", 1)[-1][:NAME_MAX]


def build(
    *,
    image: str,
    command: list[str] | tuple[str, ...],
    gpus: int,
    name: str = "",
    priority: str = "normal",
    job_class: str = "production",
    elastic: str | None = None,
    gpu_mem: str | None = None,
    datasets: list[str] | tuple[str, ...] = (),
    env: list[str] | tuple[str, ...] = (),
    mounts: list[str] | tuple[str, ...] = (),
    profile: str | None = None,
    time: str | None = None,
    wait_for_nodes: bool = False,
) -> JobRequest:
    """Check every field of a job spec given as flag-style strings."""
    gpus = check_gpus(gpus)
    image = check_image(image)
    argv = check_command(command)
    _bounded(datasets, "--dataset")
    return JobRequest(
        image=image,
        command=argv,
        gpus=gpus,
        name=_no_control(name, "--name") or default_name(argv),
        priority=check_choice(priority, PRIORITIES, "--priority"),
        job_class=check_choice(job_class, CLASSES, "--class"),
        elastic=parse_elastic(elastic, gpus) if elastic else None,
        gpu_mem_mb=parse_gpu_mem(gpu_mem) if gpu_mem else None,
        datasets=tuple(parse_dataset(d) for d in datasets),
        env=check_env(env),
        mounts=check_mounts(mounts),
        profile=_no_control(profile, "--profile") if profile else None,
        time_limit=parse_time(time) if time is not None else None,
        time_given=time is not None,
        wait_for_nodes=wait_for_nodes,
    )


_FILE_KEYS: dict[str, type | tuple[type, ...]] = {
    "image": str,
    "command": list,
    "gpus": int,
    "name": str,
    "priority": str,
    "class": str,
    "elastic": str,
    "gpu_mem": (str, int),
    "datasets": list,
    "env": dict,
    "mounts": list,
    "profile": str,
    "time": (str, int),
    "wait_for_nodes": bool,
}


def from_mapping(data: Any, where: str) -> JobRequest:
    """A job spec from one entry of a batch file; ``where`` names it in errors."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a job spec must be a table/object")
    for key, value in data.items():
        kind = _FILE_KEYS.get(key)
        if kind is None:
            close = difflib.get_close_matches(key, _FILE_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"{where}: unknown key {key!r}{hint}")
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise SpecError(f"{where}: {key} has the wrong type ({type(value).__name__})")
    for key in ("image", "command", "gpus"):
        if key not in data:
            raise SpecError(f"{where}: missing {key!r}")
    try:
        return build(
            image=data["image"],
            command=[_str_item(c, where, "command") for c in data["command"]],
            gpus=data["gpus"],
            name=data.get("name", ""),
            priority=data.get("priority", "normal"),
            job_class=data.get("class", "production"),
            elastic=data.get("elastic"),
            gpu_mem=str(data["gpu_mem"]) if "gpu_mem" in data else None,
            datasets=[_str_item(d, where, "datasets") for d in data.get("datasets", [])],
            env=[
                f"{check_env_key(k, f'env key {shown(k)}')}={_str_item(v, where, 'env')}"
                for k, v in data.get("env", {}).items()
            ],
            mounts=[_str_item(m, where, "mounts") for m in data.get("mounts", [])],
            profile=data.get("profile"),
            time=str(data["time"]) if "time" in data else None,
            wait_for_nodes=data.get("wait_for_nodes", False),
        )
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _str_item(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{where}: every item of {key} must be a string")
    return value


def read_batch(path: Path) -> Iterator[JobRequest]:
    """Job specs from a file: JSON lines, a JSON array, or TOML ``[[job]]`` tables.

    The file must be UTF-8 text of at most :data:`~gctl.limits.BATCH_BYTES_MAX`
    bytes; a document nested deeper than the parser can follow (a job spec
    needs three levels) is refused like any other that does not parse.
    """
    text = _batch_text(path)
    if path.suffix == ".toml":
        doc = _parsed(tomllib.loads, text, str(path))
        extra = sorted(set(doc) - {"job"})
        if extra:
            raise SpecError(f"{path}: unknown top-level key {shown(extra[0])} (use [[job]] tables)")
        for i, entry in enumerate(doc.get("job", []), 1):
            yield from_mapping(entry, f"{path}: job {i}")
        return
    stripped = text.lstrip()
    if stripped.startswith("["):
        for i, entry in enumerate(_parsed(json.loads, text, str(path)), 1):
            yield from_mapping(entry, f"{path}: job {i}")
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        yield from_mapping(_parsed(json.loads, line, f"{path}:{lineno}"), f"{path}:{lineno}")


def _batch_text(path: Path) -> str:
    """A batch file's text: UTF-8, at most ``BATCH_BYTES_MAX`` bytes (never read further)."""
    with path.open("rb") as fh:
        data = fh.read(BATCH_BYTES_MAX + 1)
    if len(data) > BATCH_BYTES_MAX:
        raise SpecError(f"{path}: larger than {BATCH_BYTES_MAX >> 20} MiB; split it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{path}:{lineno}: not valid UTF-8 text") from None


def _parsed(parse: Callable[[str], Any], text: str, where: str) -> Any:
    """``parse(text)``; what it cannot parse, however deep or big, is a SpecError for ``where``.

    JSON and TOML parsers raise ValueError (their own errors, an integer of
    more than 4,300 digits) or RecursionError (nesting past the interpreter's
    depth).
    """
    try:
        return parse(text)
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply to be a job spec") from None
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None
