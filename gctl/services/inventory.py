"""Inventory files for ``gctl node add -f``: many nodes at once, with their host keys.

TOML: a ``[[nodes]]`` table per node. CSV: a header row naming the
columns, then a row per node (empty cells are unset). The keys are the
flags of ``gctl node add``, written with underscores: ``name``, ``host``
and ``host_key_fingerprint`` (required: nobody confirms a key interactively
for fifty nodes), and ``port``, ``user``, ``key``, ``emulate_gpus``,
``docker_host``, ``work_dir``, ``cache_dir``, ``cache_size``. An unknown
key, a missing one or a bad value names the file and the node's place in
it; nothing is recorded unless every node is good.
"""

from __future__ import annotations

import csv
import difflib
import io
import tomllib
from pathlib import Path
from typing import Any

from gctl.limits import BATCH_BYTES_MAX
from gctl.services.errors import ServiceError
from gctl.services.nodes import NodeSpec, checked_row

FIELDS: dict[str, str] = {
    "name": "name",
    "host": "host",
    "host_key_fingerprint": "host_key_fingerprint",
    "port": "port",
    "user": "ssh_user",
    "key": "key_path",
    "emulate_gpus": "emulate_gpus",
    "docker_host": "docker_host",
    "work_dir": "work_dir",
    "cache_dir": "cache_dir",
    "cache_size": "cache_size",
}
"""Inventory keys, and the :class:`NodeSpec` field each sets."""
REQUIRED = ("name", "host", "host_key_fingerprint")


class InventoryError(ServiceError):
    """An inventory file that cannot be used; the message names the file and the entry."""


def read_inventory(path: Path) -> list[NodeSpec]:
    """The nodes of an inventory file (TOML by its ``.toml`` suffix, else CSV)."""
    text = _text(path)
    if path.suffix.lower() == ".toml":
        try:
            doc = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
            raise InventoryError(f"{path}: not valid TOML: {exc}") from None
        extra = sorted(set(doc) - {"nodes"})
        if extra or not isinstance(doc.get("nodes"), list):
            raise InventoryError(f"{path}: expected [[nodes]] tables only")
        entries = [(f"{path}: node {i}", e) for i, e in enumerate(doc["nodes"], 1)]
    else:
        try:
            rows = list(csv.DictReader(io.StringIO(text)))
        except csv.Error as exc:
            raise InventoryError(f"{path}: not valid CSV: {exc}") from None
        entries = [
            (f"{path}:{i}", {k: v for k, v in row.items() if v not in ("", None)})
            for i, row in enumerate(rows, 2)
        ]
    if not entries:
        raise InventoryError(f"{path}: no nodes in it")
    return [_spec(where, entry) for where, entry in entries]


def _text(path: Path) -> str:
    """The file's text: UTF-8, at most ``BATCH_BYTES_MAX`` bytes."""
    try:
        with path.open("rb") as fh:
            data = fh.read(BATCH_BYTES_MAX + 1)
    except OSError as exc:
        raise InventoryError(f"{path}: {exc.strerror or exc}") from None
    if len(data) > BATCH_BYTES_MAX:
        raise InventoryError(f"{path}: larger than {BATCH_BYTES_MAX >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InventoryError(f"{path}: not valid UTF-8 text") from None


def _spec(where: str, entry: Any) -> NodeSpec:
    """One entry as a node spec; an InventoryError naming ``where`` when it is not one."""
    if not isinstance(entry, dict):
        raise InventoryError(f"{where}: expected a table of keys")
    for key in entry:
        if key not in FIELDS:
            close = difflib.get_close_matches(str(key), FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InventoryError(f"{where}: unknown key {str(key)!r}{hint}")
    for key in REQUIRED:
        if key not in entry:
            raise InventoryError(f"{where}: missing {key!r}")
    values: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "port":
            try:
                values["port"] = int(value)
            except (TypeError, ValueError):
                raise InventoryError(f"{where}: port {value!r} is not a number") from None
        elif isinstance(value, str):
            values[FIELDS[key]] = value.strip()
        else:
            raise InventoryError(f"{where}: {key} must be text")
    spec = NodeSpec(**values)
    try:
        checked_row(spec)
    except ServiceError as exc:
        raise InventoryError(f"{where}: {exc}") from None
    return spec
