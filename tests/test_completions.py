"""completions/: current, they complete commands, options and values in real bash, zsh and fish.

Each shell loads the script the way an installed gctl has it loaded: bash
sources it (as bash-completion does), zsh autoloads ``_gctl`` from a
``site-functions`` directory on its fpath, fish finds ``gctl.fish`` in a
``vendor_completions.d`` directory under ``$XDG_DATA_DIRS``. The scripts call
the ``gctl`` on PATH: this checkout's console script. Job ids and node names
come from a real SQLite store chosen through ``$GCTL_DB``.
"""

from __future__ import annotations

import difflib
import json
import os
import select
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clikit import ok

from gctl.cli import docs

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
REGENERATE = f"{sys.executable} -m gctl.cli.docs"


def _shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed (scripts/test.sh installs it: apt-get install {name})"
        )
    return path


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(home)}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store chosen through $GCTL_DB, with node gpu01 and job 1 (train, pending)."""
    db = tmp_path / "gctl.db"
    cfg = tmp_path / "gctl.toml"
    cfg.write_text("")
    monkeypatch.setenv("GCTL_DB", str(db))
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))
    ok("init")
    ok("node", "add", "gpu01", "--host", "10.0.0.1", "--host-key-fingerprint", "SHA256:" + "A" * 43)
    ok("submit", "--image", "img", "--name", "train", "--", "python", "train.py")
    return db


def test_committed_scripts_are_current(tmp_path: Path) -> None:
    docs.write(tmp_path)
    for rel in docs.COMPLETIONS.values():
        fresh, committed = (tmp_path / rel).read_text(), (REPO / rel).read_text()
        diff = "".join(difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True)))
        assert fresh == committed, f"{rel} is out of date; run: {REGENERATE}\n{diff}"


NODE_COMMANDS = {
    "add",
    "ls",
    "show",
    "drain",
    "undrain",
    "down",
    "resume",
    "set",
    "rm",
    "rekey",
    "probe",
    "top",
}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("gctl no", {"node"}),
        ("gctl qu", {"queue"}),
        ("gctl node ", NODE_COMMANDS),
        ("gctl submit --gp", {"--gpus", "--gpu-mem"}),
    ],
)
def test_bash_completes_commands_and_options(tmp_path: Path, line: str, expected: set[str]) -> None:
    assert set(_bash(tmp_path, line)) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("gctl cancel ", ["1"]),
        ("gctl show job ", ["1"]),
        ("gctl node show ", ["gpu01"]),
        ("gctl node drain g", ["gpu01"]),
        ("gctl queue -w gpu01,", []),
        ("gctl queue -t pd,RUN", ["pd,RUNNING"]),
        ("gctl submit --priority ", ["low", "normal", "high"]),
        ("gctl sim run t.csv --compare fifo,ga", ["fifo,gandiva"]),
    ],
)
def test_bash_completes_values_from_the_store(
    site: Path, tmp_path: Path, line: str, expected: list[str]
) -> None:
    assert _bash(tmp_path, line) == expected


def test_no_store_no_candidates_and_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCTL_DB", str(tmp_path / "missing" / "gctl.db"))
    assert _bash(tmp_path, "gctl node show ") == []
    (tmp_path / "junk.db").write_text("not a database")
    monkeypatch.setenv("GCTL_DB", str(tmp_path / "junk.db"))
    assert _bash(tmp_path, "gctl cancel ") == []


def _bash(tmp_path: Path, line: str) -> list[str]:
    """What bash offers for LINE (COMPREPLY), with the bash script sourced; nothing on stderr."""
    words = line.split(" ")
    script = (
        f"source {REPO / docs.COMPLETIONS['bash']}\n"
        f"COMP_WORDS=({' '.join(map(shlex.quote, words))}); COMP_CWORD={len(words) - 1}\n"
        '_gctl_completion gctl; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(
        [_shell("bash"), "--norc", "--noprofile", "-c", script],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stderr == ""
    return out.stdout.split()


def _fish(tmp_path: Path, line: str) -> list[str]:
    """What fish offers for LINE, with gctl.fish installed as a vendor completion."""
    vendor = tmp_path / "share" / "fish" / "vendor_completions.d"
    vendor.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / docs.COMPLETIONS["fish"], vendor)
    out = subprocess.run(
        [_shell("fish"), "-c", f"complete -C{line!r}"],
        env={**_env(tmp_path), "XDG_DATA_DIRS": str(tmp_path / "share")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.splitlines()


def test_fish_completes_commands_and_options(tmp_path: Path) -> None:
    assert [c.split("\t")[0] for c in _fish(tmp_path, "gctl no")] == ["node"]
    options = _fish(tmp_path, "gctl submit --gp")
    assert "--gpus\tGPUs the job needs." in options
    assert {c.split("\t")[0] for c in options} == {"--gpus", "--gpu-mem"}


def test_fish_completes_job_ids_and_node_names_with_their_help(site: Path, tmp_path: Path) -> None:
    assert _fish(tmp_path, "gctl cancel ") == ["1\tPENDING train"]
    assert _fish(tmp_path, "gctl node show ") == ["gpu01\t10.0.0.1"]


def _zsh(tmp_path: Path, keys: bytes, until: bytes, timeout: float = 60) -> bytes:
    """Type KEYS into an interactive zsh with ``_gctl`` autoloaded; its output up to UNTIL.

    Ctrl-X prints the edit buffer as ``<buffer>...</buffer>``.
    """
    functions = tmp_path / "site-functions"
    functions.mkdir(exist_ok=True)
    shutil.copy(REPO / docs.COMPLETIONS["zsh"], functions)
    (tmp_path / ".zshrc").write_text(
        f"fpath=({functions} $fpath)\n"
        "autoload -Uz compinit && compinit -u -D\n"
        'show-buffer() { zle -I; print -r -- "<buffer>$BUFFER</buffer>" }\n'
        "zle -N show-buffer\n"
        "bindkey '^X' show-buffer\n"
        "PS1='READY> '\n"
    )
    primary, secondary = os.openpty()
    shell = subprocess.Popen(
        [_shell("zsh"), "-i"],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env={**_env(tmp_path), "ZDOTDIR": str(tmp_path), "TERM": "dumb"},
        start_new_session=True,
    )
    os.close(secondary)
    seen = b""

    def read_until(text: bytes) -> bool:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while text not in seen and time.monotonic() < deadline:
            if select.select([primary], [], [], 0.1)[0]:
                try:
                    seen += os.read(primary, 65536)
                except OSError:  # the shell has gone
                    return False
        return text in seen

    try:
        assert read_until(b"READY> "), f"zsh gave no prompt: {seen!r}"
        os.write(primary, keys)
        assert read_until(until), f"zsh never showed {until!r}: {seen!r}"
        return seen
    finally:
        shell.kill()
        shell.wait(timeout=10)
        os.close(primary)


def test_zsh_completes_a_command_on_the_first_tab(tmp_path: Path) -> None:
    """The first Tab of a new shell already completes: the autoloaded file completes as it loads."""
    seen = _zsh(tmp_path, b"gctl no\t\x18", until=b"</buffer>")
    assert b"<buffer>gctl node </buffer>" in seen


def test_zsh_lists_options_with_their_help(tmp_path: Path) -> None:
    # zsh lists --gpu-mem before --gpus, and may write the two lines in separate reads.
    seen = _zsh(tmp_path, b"gctl submit --gp\x04", until=b"GPUs the job needs.")
    assert b"--gpu-mem" in seen and b"GPU memory needed" in seen and b"--gpus" in seen


@pytest.mark.parametrize(
    ("line", "completed"),
    [(b"gctl cancel ", b"gctl cancel 1 "), (b"gctl node show ", b"gctl node show gpu01 ")],
)
def test_zsh_completes_job_ids_and_node_names(
    site: Path, tmp_path: Path, line: bytes, completed: bytes
) -> None:
    seen = _zsh(tmp_path, line + b"\t\x18", until=b"</buffer>")
    assert b"<buffer>" + completed + b"</buffer>" in seen


MODULES = """
import json, sys
sys.argv[0] = "gctl"
from gctl.cli.launch import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

HEAVY = (
    "sqlalchemy",
    "alembic",
    "gctl.store.models",
    "gctl.core",
    "gctl.sim",
    "gctl.hosts",
    "paramiko",
    "docker",
    "gctl.daemon",
    "gctl.watch",
    "textual",
)
"""What no completion request may load: database, scheduler, simulator, hosts, daemon, dashboard."""


@pytest.mark.parametrize(
    ("shell", "request_env", "also_heavy"),
    [
        ("bash", {"COMP_WORDS": "gctl submit --gp", "COMP_CWORD": "2"}, ("rich",)),
        # Typer formats the help shown beside each zsh and fish candidate with rich.
        ("zsh", {"_TYPER_COMPLETE_ARGS": "gctl submit --gp"}, ()),
        (
            "fish",
            {"_TYPER_COMPLETE_ARGS": "gctl submit --gp", "_TYPER_COMPLETE_FISH_ACTION": "get-args"},
            (),
        ),
    ],
)
def test_a_completion_request_loads_no_heavy_module(
    shell: str, request_env: dict[str, str], also_heavy: tuple[str, ...]
) -> None:
    """Every Tab runs gctl once (fish: twice); it must not pay for what only commands need."""
    env = {**os.environ, **request_env, docs.COMPLETE_VAR: f"complete_{shell}"}
    out = subprocess.run(
        [sys.executable, "-c", MODULES],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--gpus" in out.stdout
    loaded = set(json.loads(out.stderr.splitlines()[-1]))
    heavy = HEAVY + also_heavy
    assert not {m for m in loaded if m.startswith(heavy)}


def test_completing_from_the_store_loads_no_heavy_module(site: Path) -> None:
    """Node names are read from a SQLite store with the standard library alone."""
    request = {"COMP_WORDS": "gctl node show ", "COMP_CWORD": "3"}
    env = {**os.environ, **request, docs.COMPLETE_VAR: "complete_bash"}
    out = subprocess.run(
        [sys.executable, "-c", MODULES],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["gpu01"]
    loaded = set(json.loads(out.stderr.splitlines()[-1]))
    assert not {m for m in loaded if m.startswith((*HEAVY, "rich"))}
