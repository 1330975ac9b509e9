"""What ``gctl submit`` checks as sbatch does: ``--time`` in Slurm's notation, the site's
default and maximum, and a job larger than the whole cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clikit import ok, run

from gctl import config
from gctl.config import Limits, SitePolicy
from gctl.identity import Who
from gctl.services import access
from gctl.services.errors import ServiceError
from gctl.slurmtime import TimeFormatError, format_time_limit, parse_time_limit

FP = ("--host-key-fingerprint", "SHA256:" + "A" * 43)
"""A well-formed host key fingerprint: these nodes are recorded, never contacted."""


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800.0),
        ("0:20", 20.0),
        ("1:30", 90.0),
        ("2:00:00", 7200.0),
        ("1-0", 86400.0),
        ("1-02", 93600.0),
        ("1-02:30", 95400.0),
        ("2-00:00:05", 172805.0),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_every_form_sbatch_takes_is_read(text: str, seconds: float | None) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "-5", "1:2:3:4", "0", "0:00", "1-", "a-1", "9" * 40])
def test_what_is_not_a_slurm_time_is_refused(text: str) -> None:
    with pytest.raises(TimeFormatError, match="--time"):
        parse_time_limit(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(20.0, "00:00:20"), (3725.0, "01:02:05"), (93600.0, "1-02:00:00"), (None, "UNLIMITED")],
)
def test_a_limit_prints_as_slurm_prints_it(seconds: float | None, text: str) -> None:
    assert format_time_limit(seconds) == text
    assert parse_time_limit(text) == seconds


ALICE = Who("alice", 1000, 1000, operator=False, login="alice")
ROOT = Who("root", 0, 0, operator=True, login="root")


def test_a_job_gets_the_default_then_the_maximum_and_no_more_than_the_maximum() -> None:
    both = SitePolicy(defaults=Limits(default_time=600.0, max_time=3600.0))
    only_max = SitePolicy(defaults=Limits(max_time=3600.0))
    assert access.time_limit(ALICE, both, None, given=False) == 600.0
    assert access.time_limit(ALICE, only_max, None, given=False) == 3600.0
    assert access.time_limit(ALICE, SitePolicy(), None, given=False) is None
    assert access.time_limit(ALICE, both, 3600.0, given=True) == 3600.0
    with pytest.raises(ServiceError, match="--time 01:00:01: alice may ask for 01:00:00 at most"):
        access.time_limit(ALICE, both, 3601.0, given=True)
    with pytest.raises(ServiceError, match="--time UNLIMITED"):
        access.time_limit(ALICE, both, None, given=True)
    assert access.time_limit(ROOT, both, 7200.0, given=True) == 7200.0


def test_the_site_limits_are_read_from_the_config_in_slurm_notation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "gctl.toml"
    monkeypatch.setenv("GCTL_CONFIG", str(cfg))  # read as the site's policy: tests run as root
    cfg.write_text(
        '[limits]\ndefault_time = "1:00:00"\nmax_time = "1-00:00:00"\n'
        '[users.bob]\nmax_time = "30"\n'
    )
    policy = config.site_policy()
    assert policy.defaults.default_time == 3600.0
    assert policy.defaults.max_time == 86400.0
    assert policy.limits_for("bob").max_time == 1800.0
    cfg.write_text('[limits]\ndefault_time = "2:00:00"\nmax_time = "1:00:00"\n')
    with pytest.raises(config.ConfigError, match="default_time is longer than max_time"):
        config.site_policy()
    cfg.write_text('[limits]\nmax_time = "soon"\n')
    with pytest.raises(config.ConfigError, match=r"\[limits\] max_time 'soon': not a time limit"):
        config.site_policy()


def test_submit_time_is_stored_shown_and_defaulted_by_the_site(gdb: Path) -> None:
    cfg = Path(str(gdb).replace("gctl.db", "gctl.toml"))
    cfg.write_text('[security]\nmount_prefixes = ["/data"]\n[limits]\ndefault_time = "45"\n')
    first = int(ok("submit", "--image", "i", "--time", "1-02:03:04", "--parsable", "--", "x"))
    second = int(ok("submit", "--image", "i", "--parsable", "--", "x"))
    shown = ok("show", "job", str(first))
    assert "RunTime=00:00:00 TimeLimit=1-02:03:04" in shown
    assert "TimeLimit=00:45:00" in ok("show", "job", str(second))
    doc = json.loads(ok("show", "job", str(first), "--json"))
    assert doc["spec"]["time_limit"] == 93784.0
    code, out, err = run("submit", "--image", "i", "-t", "soon", "--", "x")
    assert (code, out) == (2, "")
    assert err.startswith("gctl: error: --time 'soon': not a time limit")
    batch = Path(str(gdb).replace("gctl.db", "jobs.jsonl"))
    batch.write_text('{"image": "i", "command": ["x"], "gpus": 1, "time": 90}\n')
    third = int(ok("submit", "-f", str(batch), "--parsable"))
    assert "TimeLimit=01:30:00" in ok("show", "job", str(third))


def test_a_job_larger_than_the_whole_cluster_is_refused_unless_told_to_wait(gdb: Path) -> None:
    ok("node", "add", "n1", "--host", "h", *FP, "--emulate-gpus", "4xV100-16GB")
    ok("node", "add", "n2", "--host", "h", *FP, "--emulate-gpus", "4xV100-16GB")
    code, out, err = run("submit", "--image", "i", "--gpus", "9", "--", "x")
    assert (code, out) == (1, "")
    assert err == (
        "gctl: error: the job asks for 9 GPUs and the cluster has 8: it could never start"
        " (--wait-for-nodes keeps it queued for nodes still to come)\n"
    )
    assert json.loads(ok("queue", "--json"))["jobs"] == []
    assert int(ok("submit", "--image", "i", "--gpus", "8", "--parsable", "--", "x")) == 1
    waiting = ok(
        "submit", "--image", "i", "--gpus", "9", "--wait-for-nodes", "--parsable", "--", "x"
    )
    assert int(waiting) == 2
    code, _, err = run("submit", "--image", "i", "--gpus", "16", "--elastic", "9:16", "--", "x")
    assert code == 1 and "asks for 9 GPUs" in err  # an elastic job needs its minimum
