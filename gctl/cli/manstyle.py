"""Help that reads like a man page: a metavar for every value, never a Python type.

Typer shows an option's value as its Python type (``--gpus <int>``,
``--env <list[str]>``, ``--limit <int range>``) unless the option names a
metavar, and an argument as its name followed by its type. The root
group, :class:`Root`, gives every parameter of the command tree a metavar
once Typer has built it, so no declaration has to: the metavar it declares
(``metavar="FILE.csv"``), else the one :data:`METAVARS` lists for its
option name, else one from its type (``N`` for a whole number) or from the
last word of its name (``--cache-dir DIR``, ``--image IMAGE``). Flags take
no value and show none. Arguments are shown by their metavar alone, and in
usage lines as man pages write them: ``JOB_ID``, ``[NODE]...``. A number's
bounds read ``[at least 1]`` or ``[0 to 1]`` (:func:`bounds`).
"""

from __future__ import annotations

from typing import Any

from typer._click import Command, Context, Parameter
from typer.core import TyperArgument, TyperGroup, TyperOption

from gctl.limits import INT_MAX

METAVARS = {
    "--db": "FILE|URL",
    "--env": "KEY=VALUE",
    "--option": "KEY=VALUE",
    "--gpu-mem": "SIZE",
    "--cache-size": "SIZE",
    "--elastic": "MIN:MAX",
    "--dataset": "NAME[:PATH]",
    "--mount": "SRC:DST[:ro]",
    "--to": "NODE[:GPU,...]",
    "--job": "JOB_ID",
    "--key": "FILE",
    "--port": "PORT",
    "--metrics": "[HOST]:PORT",
    "--since": "TIME",
    "--sort": "FIELDS",
    "--jobs": "JOB_IDS",
    "--time": "TIME",
    "--window": "START:END",
    "--compare": "POLICY,...",
    "--nodelist": "NODES",
    "--state": "STATES",
    "--elastic-fraction": "FRACTION",
    "--opportunistic-fraction": "FRACTION",
    "--data-bandwidth": "GB/S",
    "--output-max": "SIZE",
    "--output-keep": "DAYS",
    **dict.fromkeys(
        (
            "--tick",
            "--interval",
            "--introspect-every",
            "--heartbeat-every",
            "--reconcile-every",
            "--control-every",
            "--node-timeout",
            "--grace",
            "--gpu-mem-grace",
            "--lease",
            "--profile-seconds",
        ),
        "SECONDS",
    ),
}
"""Metavars by option name, where the rule of :func:`metavar` would say less; an option whose
declaration names a metavar keeps its own."""


class ManArgument(TyperArgument):
    """An argument shown by its metavar alone, in help and in usage lines; its bounds in words."""

    def display_type_rich(self, ctx: Context) -> str | None:
        """No ``<type>`` after the argument's name in help."""
        return None

    def get_usage_pieces(self, ctx: Context) -> list[str]:
        """``NODE``, ``[NODE]``, ``[NODE]...``: optional in brackets, repeatable with dots."""
        piece = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return [piece + ("..." if self.nargs != 1 else "")]

    def _get_number_range_help_str(self) -> str | None:
        return bounds(self.min, self.max)


class ManOption(TyperOption):
    """An option shown by its names and metavar; its bounds in words."""

    def _get_number_range_help_str(self) -> str | None:
        return bounds(self.min, self.max)


class Root(TyperGroup):
    """The ``gctl`` group: once Typer has built the command tree, every value gets its metavar."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for command in _tree(self):
            for param in command.params:
                param.metavar = metavar(param)
                # Typer builds its parameters itself and takes no class to build
                # instead; these subclasses change only how a parameter is shown.
                if isinstance(param, TyperArgument):
                    param.__class__ = ManArgument
                elif isinstance(param, TyperOption):
                    param.__class__ = ManOption


def metavar(param: Parameter) -> str | None:
    """The metavar a parameter shows: its own, :data:`METAVARS`', or one from its type or name."""
    if param.metavar is not None:
        return param.metavar
    if isinstance(param, TyperArgument):
        return (param.name or "").upper()
    if not isinstance(param, TyperOption) or param.is_flag or param.count:
        return None
    name = next((o for o in param.opts if o.startswith("--")), param.opts[0])
    if name in METAVARS:
        return METAVARS[name]
    desc = param.type_descriptor
    value = desc.annotation.__args__[0] if desc.is_list else desc.annotation
    if value is int:
        return "N"
    if value is float:
        return "NUMBER"
    return name.lstrip("-").rsplit("-", 1)[-1].upper()


def bounds(low: float | None, high: float | None) -> str | None:
    """A number's bounds in help: ``at least 1``, ``0 to 1``, ``at most 604800``, not ``1<=x``.

    :data:`~gctl.limits.INT_MAX`, the bound of every whole number the store
    holds, goes unsaid.
    """
    high = None if high == INT_MAX else high
    if high is None:
        return None if low is None else f"at least {_number(low)}"
    if low is None:
        return f"at most {_number(high)}"
    return f"{_number(low)} to {_number(high)}"


def _number(value: float) -> str:
    """``604800``, ``0.5``: a bound as it would be typed."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _tree(command: Command) -> list[Command]:
    """The command and every command under it."""
    subs = command.commands.values() if isinstance(command, TyperGroup) else ()
    return [command, *(c for sub in subs for c in _tree(sub))]
