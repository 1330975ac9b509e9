"""Job specs as users write them: flag values and batch files, checked field by field.

Every check raises :class:`SpecError` naming the field, so ``gctl submit``
says exactly what is wrong in one line. Text (command arguments, env
values, names) is kept byte for byte; nothing here is ever given to a shell.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gctl.hosts.emulated import EMULATED_UTIL_ENV, GPU_DIR_IN_CONTAINER, declared_util
from gctl.hosts.mounts import Mount

PRIORITIES = ("low", "normal", "high")
CLASSES = ("production", "opportunistic")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEM = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?$", re.IGNORECASE)
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


def _text(value: str, what: str) -> str:
    """``value`` unchanged if a container can be given it: no NUL, encodable as UTF-8."""
    if "\x00" in value:
        raise SpecError(f"{what}: NUL characters are not allowed")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        why = "not valid UTF-8 text (undecodable bytes or a lone surrogate)"
        raise SpecError(f"{what}: {why}") from None
    return value


def _no_control(value: str, what: str) -> str:
    _text(value, what)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SpecError(f"{what}: control characters are not allowed")
    return value


def check_image(image: str) -> str:
    """A container image reference (no spaces or shell characters)."""
    if not _IMAGE.fullmatch(image):
        raise SpecError(f"--image {image!r}: not a valid image reference")
    return image


def check_gpus(gpus: int) -> int:
    """A GPU count of at least 1."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError(f"--gpus {gpus!r}: must be a whole number >= 1")
    return gpus


def check_choice(value: str, choices: tuple[str, ...], flag: str) -> str:
    """One of ``choices`` (case-insensitive), returned in lower case."""
    low = value.lower() if isinstance(value, str) else value
    if low not in choices:
        raise SpecError(f"{flag} {value!r}: choose one of {', '.join(choices)}")
    return str(low)


def parse_gpu_mem(text: str) -> int:
    """GPU memory such as ``8G``, ``16GiB`` or ``512M``, in MiB."""
    m = _MEM.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise SpecError(f"--gpu-mem {text!r}: expected a size such as 8G, 16GiB or 512M")
    unit = (m.group(2) or "m")[0].lower()
    mb = round(float(m.group(1)) * _MEM_MB[unit])
    if mb < 1:
        raise SpecError(f"--gpu-mem {text!r}: must be at least 1M")
    return mb


def parse_elastic(text: str, gpus: int) -> tuple[int, int]:
    """``MIN:MAX`` GPUs for an elastic job; the range must contain ``--gpus``."""
    lo_s, sep, hi_s = text.partition(":")
    if not sep or not lo_s.isdigit() or not hi_s.isdigit():
        raise SpecError(f"--elastic {text!r}: expected MIN:MAX, e.g. 1:4")
    lo, hi = int(lo_s), int(hi_s)
    if not 1 <= lo <= gpus <= hi:
        raise SpecError(f"--elastic {text!r}: need 1 <= MIN <= --gpus ({gpus}) <= MAX")
    return lo, hi


def parse_env(text: str) -> tuple[str, str]:
    """``KEY=VALUE``; the value is kept exactly as typed."""
    key, sep, value = text.partition("=")
    if not sep or not _ENV_KEY.match(key):
        raise SpecError(f"--env {text!r}: expected KEY=VALUE with KEY a shell-style name")
    _text(value, f"--env {text!r}")
    if key == EMULATED_UTIL_ENV:
        try:
            declared_util(value)
        except ValueError as exc:
            raise SpecError(f"--env {text!r}: {exc}") from None
    return key, value


def parse_mount(text: str) -> Mount:
    """``SRC:DST[:ro|rw]`` with absolute paths; DST is not ``/`` nor gctl's own (reserved)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise SpecError(f"--mount {text!r}: expected SRC:DST or SRC:DST:ro")
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise SpecError(f"--mount {text!r}: mode must be ro or rw")
    src, dst = parts[0], parts[1]
    for path in (src, dst):
        _no_control(path, f"--mount {text!r}")
        if not path.startswith("/"):
            raise SpecError(f"--mount {text!r}: {path!r} is not an absolute path")
    target = _in_container(dst)
    if target == "/":
        raise SpecError(f"--mount {text!r}: cannot mount over the container's root /")
    for reserved in RESERVED_TARGETS:
        if target == reserved or target.startswith(reserved + "/"):
            raise SpecError(f"--mount {text!r}: {reserved} is reserved by gctl in the container")
    return Mount(src, dst, mode == "ro")


def _in_container(dst: str) -> str:
    """A mount target as Docker resolves it: ``//gctl/``, ``/x/../gctl`` are ``/gctl``."""
    return posixpath.normpath("/" + dst.lstrip("/"))


def check_command(command: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A command to exec: a non-empty program, then arguments; each kept byte for byte."""
    if not command:
        raise SpecError("command: give the command to run after --")
    if not command[0]:
        raise SpecError("command: the program to run (the first argument) is empty")
    return tuple(_text(arg, f"command: argument {i}") for i, arg in enumerate(command, 1))


def check_mounts(mounts: list[str] | tuple[str, ...]) -> tuple[Mount, ...]:
    """``--mount`` values, no two onto the same target (Docker refuses duplicate mount points)."""
    parsed = tuple(parse_mount(m) for m in mounts)
    seen: set[str] = set()
    for mount in parsed:
        target = _in_container(mount.dst)
        if target in seen:
            raise SpecError(f"--mount: two mounts onto {target}")
        seen.add(target)
    return parsed


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
) -> JobRequest:
    """Check every field of a job spec given as flag-style strings."""
    gpus = check_gpus(gpus)
    return JobRequest(
        image=check_image(image),
        command=check_command(command),
        gpus=gpus,
        name=_no_control(name, "--name"),
        priority=check_choice(priority, PRIORITIES, "--priority"),
        job_class=check_choice(job_class, CLASSES, "--class"),
        elastic=parse_elastic(elastic, gpus) if elastic else None,
        gpu_mem_mb=parse_gpu_mem(gpu_mem) if gpu_mem else None,
        datasets=tuple(_no_control(d, "--dataset") for d in datasets),
        env=dict(parse_env(e) for e in env),
        mounts=check_mounts(mounts),
        profile=_no_control(profile, "--profile") if profile else None,
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
        if not isinstance(value, kind) or isinstance(value, bool):
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
            env=[f"{k}={_str_item(v, where, 'env')}" for k, v in data.get("env", {}).items()],
            mounts=[_str_item(m, where, "mounts") for m in data.get("mounts", [])],
            profile=data.get("profile"),
        )
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _str_item(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{where}: every item of {key} must be a string")
    return value


def read_batch(path: Path) -> Iterator[JobRequest]:
    """Job specs from a file: JSON lines, a JSON array, or TOML ``[[job]]`` tables."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        lineno = exc.object.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"{path}:{lineno}: not valid UTF-8 text") from None
    if path.suffix == ".toml":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{path}: {exc}") from None
        extra = sorted(set(doc) - {"job"})
        if extra:
            raise SpecError(f"{path}: unknown top-level key {extra[0]!r} (use [[job]] tables)")
        for i, entry in enumerate(doc.get("job", []), 1):
            yield from_mapping(entry, f"{path}: job {i}")
        return
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}: {exc}") from None
        for i, entry in enumerate(entries, 1):
            yield from_mapping(entry, f"{path}: job {i}")
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}:{lineno}: {exc.msg}") from None
        yield from_mapping(entry, f"{path}:{lineno}")
