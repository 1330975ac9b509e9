"""``gctl sim run`` as a user runs it: tables, JSON, and one-line errors with exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from clikit import run
from hypothesis import given, settings
from hypothesis import strategies as st

from gctl.sim.cluster_spec import ClusterSpecError, parse_cluster

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "traces" / "philly_models_trace3.csv"


def test_json_report_compares_both_policies_on_the_same_jobs() -> None:
    code, out, err = run("sim", "run", str(TRACE), "--cluster", "2x8", "--limit", "60", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["policy"] for r in doc["results"]] == ["gandiva", "fifo"]
    assert doc["jobs"] == 60 and doc["total_gpus"] == 16
    for r in doc["results"]:
        assert r["metrics"]["finished"] + len(r["unfinished"]) + len(r["rejected"]) == 60
    change = doc["changes"]["avg_jct"]
    assert change["change"] == (change["new"] - change["base"]) / change["base"]


def test_table_output_names_the_policies_and_metrics() -> None:
    code, out, _ = run("sim", "run", str(TRACE), "--cluster", "2x8", "--limit", "30")
    assert code == 0
    for word in ("gandiva", "fifo", "avg JCT", "makespan", "GPU utilisation", "migrations"):
        assert word in out


def test_plugin_policy_is_chosen_like_a_builtin() -> None:
    code, out, err = run(
        "sim",
        "run",
        str(TRACE),
        "--cluster",
        "2x8",
        "--limit",
        "30",
        "--policy",
        "backfill",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["results"][0]["policy"] == "backfill"


def test_oversized_jobs_are_reported_not_dropped() -> None:
    code, out, _ = run("sim", "run", str(TRACE), "--cluster", "1x8", "--limit", "40", "--json")
    assert code == 0
    doc = json.loads(out)
    rejected = doc["results"][0]["rejected"]
    assert rejected, "trace3 has 16- and 32-GPU jobs in its first 40"
    assert doc["results"][0]["metrics"]["jobs"] == 40 - len(rejected)


def test_malformed_trace_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(TRACE.read_text().splitlines()[0] + "\n0,1,0,5,dqn,128,notanumber,1,1,1,1,1,0\n")
    code, out, err = run("sim", "run", str(bad))
    assert code == 1 and out == ""
    assert err.startswith("gctl: error: ") and err.count("\n") == 1
    assert f"{bad}:2:" in err
    assert "Traceback" not in err


def test_errors_are_one_line_and_exit_1() -> None:
    cases = [
        ("sim", "run", "/nonexistent/trace.csv"),
        ("sim", "run", str(TRACE), "--cluster", "0x8"),
        ("sim", "run", str(TRACE), "--policy", "nosuch"),
        ("sim", "run", str(TRACE), "-o", "max_hieght=2"),
        ("sim", "run", str(TRACE), "-o", "noequals"),
        ("sim", "run", str(TRACE), "--window", "5h:1h"),
        ("sim", "run", str(TRACE), "--compare", "gandiva"),
    ]
    for args in cases:
        code, out, err = run(*args)
        assert code == 1, (args, err)
        assert out == ""
        assert err.startswith("gctl: error: ") and err.count("\n") == 1, (args, err)


def test_usage_errors_exit_2() -> None:
    code, _, err = run("sim", "run", str(TRACE), "--limit", "0")
    assert code == 2
    assert "Traceback" not in err


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=20).filter(lambda s: not s.startswith("-")))
def test_garbage_cluster_specs_never_crash(spec: str) -> None:
    """Whatever the spec, the CLI agrees with the parser: a table, or one error line and exit 1."""
    try:
        parse_cluster(spec)
    except ClusterSpecError as exc:
        expected: str | None = " ".join(str(exc).split())
    else:
        expected = None
    code, out, err = run("sim", "run", str(TRACE), "--cluster", spec, "--limit", "5")
    if expected is None:
        assert (code, err) == (0, "")
        assert "avg JCT" in out
    else:
        assert (code, out) == (1, "")
        assert err == f"gctl: error: {expected}\n"
