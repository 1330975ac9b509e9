"""Modal dialogs: help, yes/no confirmation, a reason prompt and the migration target list."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from gctl.watch.fmt import plain
from gctl.watch.frame import Frame

KEYS: tuple[tuple[str, str], ...] = (
    ("?", "this help"),
    ("/", "filter jobs, their nodes and the timeline (Esc clears)"),
    ("Tab / mouse", "move between nodes, jobs and events"),
    ("Enter", "details of the job or node under the cursor"),
    ("Esc", "back"),
    ("g", "hide / show the GPUs of the node under the cursor"),
    ("l", "output of the selected job (gctl logs)"),
    ("s / r", "suspend / resume the selected job"),
    ("m", "migrate the selected job (choose the target node)"),
    ("c", "cancel the selected job"),
    ("d / u", "drain (asks a reason) / undrain the selected node"),
    ("I N U T G H P A", "sort by id, name, user, state, GPUs, height, rate, time (again: reverse)"),
    ("click a header", "sort by that column (▲ ▼ mark it)"),
    ("q", "quit"),
)
"""The keys, as the help screen lists them."""

_DIALOG_CSS = """
ModalScreen { align: center middle; }
ModalScreen > Vertical {
    width: 72; height: auto; max-height: 80%;
    border: thick $accent; background: $surface; padding: 1 2;
}
"""


class HelpScreen(ModalScreen[None]):
    """The keys and what they do."""

    DEFAULT_CSS = _DIALOG_CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss(None)", "Close")
    ]

    def __init__(self, readonly: bool) -> None:
        """The help, noting when actions are disabled."""
        super().__init__()
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        """A table of keys."""
        table = Table(box=None, show_header=False)
        table.add_column(style="bold")
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        note = "\nread-only (--readonly): actions are disabled" if self.readonly else ""
        with Vertical():
            yield Label("gctl watch: keys")
            yield Static(table)
            yield Label(note + "\nEsc closes")


class ConfirmScreen(ModalScreen[bool]):
    """Ask yes or no before an action; ``y`` confirms, ``n`` or Esc declines."""

    DEFAULT_CSS = _DIALOG_CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "dismiss(True)", "Yes"),
        Binding("n,escape", "dismiss(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        """A dialog asking ``question``."""
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        """The question and the keys."""
        with Vertical():
            yield Label(plain(self.question))
            yield Label("[b]y[/b] yes   [b]n[/b] / Esc no")


class ReasonScreen(ModalScreen[str | None]):
    """Ask for a reason (drain); Enter gives it, Esc gives up."""

    DEFAULT_CSS = _DIALOG_CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, question: str) -> None:
        """A dialog asking ``question``."""
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        """The question and an input."""
        with Vertical():
            yield Label(plain(self.question))
            yield Input(placeholder="reason (recorded with your name and the time)")
            yield Label("Enter confirms, Esc cancels")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Give the reason typed (nothing typed: ask again)."""
        if event.value.strip():
            self.dismiss(event.value.strip())


class MigrateScreen(ModalScreen[str | None]):
    """Choose the node to migrate a job to: nodes in service, lowest height first."""

    DEFAULT_CSS = _DIALOG_CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, job_id: int, frame: Frame) -> None:
        """Targets from ``frame``: every node not drained or down, least loaded first."""
        super().__init__()
        self.job_id = job_id
        job = frame.job(job_id)
        here = {w.split(":")[0] for w in (job.where.split() if job else ())}
        self.targets = sorted(
            (
                n.view
                for n in frame.nodes
                if n.view.state in ("idle", "mix", "alloc") and n.view.name not in here
            ),
            key=lambda v: (v.height, v.name),
        )

    def compose(self) -> ComposeResult:
        """The candidate nodes."""
        with Vertical():
            yield Label(f"Migrate job {self.job_id} to which node? (Enter chooses, Esc cancels)")
            yield OptionList(
                *(
                    Option(
                        plain(
                            f"{v.name:<12} {v.state_flag:<6} {v.gpus_used}/{v.gpus_total} GPUs"
                            f"  height {v.height:.2f}"
                        ),
                        id=v.name,
                    )
                    for v in self.targets
                )
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Give the node chosen."""
        self.dismiss(event.option.id)
