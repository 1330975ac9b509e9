"""``gctl sim run`` as a user runs it: tables, JSON, and one-line errors with exit codes."""

from __future__ import annotations

import csv
import itertools
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
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
    assert list(doc["changes"]) == ["fifo"]
    change = doc["changes"]["fifo"]["avg_jct"]
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


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("sim", "run", "/nonexistent/trace.csv"), 1),
        (("sim", "run", str(TRACE), "--cluster", "0x8"), 1),
        (("sim", "run", str(TRACE), "--limit", "0"), 2),
        (("sim", "run", str(TRACE), "--policy", "nosuch"), 2),
        (("sim", "run", str(TRACE), "-o", "max_hieght=2"), 2),
        (("sim", "run", str(TRACE), "-o", "noequals"), 2),
        (("sim", "run", str(TRACE), "--window", "5h:1h"), 2),
    ],
)
def test_errors_are_one_line_usage_ones_exit_2(args: tuple[str, ...], expected: int) -> None:
    code, out, err = run(*args)
    assert (code, out) == (expected, ""), err
    assert err.startswith("gctl: error: ") and err.count("\n") == 1, err


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


# --- several baselines and the per-job CSV -------------------------------------

SMALL = ("--cluster", "2x8", "--limit", "60")


def test_table_has_a_column_per_policy_and_a_change_column_per_baseline() -> None:
    code, out, err = run("sim", "run", str(TRACE), *SMALL, "--compare", "fifo,backfill")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "metric" in line)
    cells = [c.strip() for c in header.strip("┃ ").split("┃")]
    assert cells == [
        "metric",
        "gandiva",
        "fifo",
        "backfill",
        "gandiva vs fifo",
        "gandiva vs backfill",
    ]
    row = next(line for line in out.splitlines() if "avg JCT" in line)
    changes = [c.strip() for c in row.strip("│ ").split("│")][4:]
    assert len(changes) == 2 and all(c.endswith("%") for c in changes), row


def test_json_has_the_changes_against_each_baseline_in_order() -> None:
    code, out, err = run("sim", "run", str(TRACE), *SMALL, "--compare", "backfill,fifo", "--json")
    assert code == 0, err
    doc = json.loads(out)
    metrics = {r["policy"]: r["metrics"] for r in doc["results"]}
    assert list(metrics) == ["gandiva", "backfill", "fifo"]
    assert list(doc["changes"]) == ["backfill", "fifo"]
    for baseline, changes in doc["changes"].items():
        for key in ("avg_jct", "makespan", "gpu_utilisation"):
            assert changes[key]["base"] == metrics[baseline][key]
            assert changes[key]["new"] == metrics["gandiva"][key]
    assert doc["changes"]["fifo"]["avg_jct"] != doc["changes"]["backfill"]["avg_jct"]


def test_empty_compare_means_no_baseline() -> None:
    code, out, err = run("sim", "run", str(TRACE), *SMALL, "--compare", "", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [r["policy"] for r in doc["results"]] == ["gandiva"]
    assert doc["changes"] == {}
    code, out, _ = run("sim", "run", str(TRACE), *SMALL, "--compare", "")
    assert code == 0 and " vs " not in out


@pytest.mark.parametrize(
    ("compare", "why"),
    [
        ("gandiva", "'gandiva' is the --policy itself"),
        ("fifo,gandiva", "'gandiva' is the --policy itself"),
        ("fifo,fifo", "'fifo' is named twice"),
        ("fifo,nosuch", "unknown policy 'nosuch'"),
        ("fifo,,backfill", "empty name"),
        (",", "empty name"),
    ],
)
def test_bad_baselines_are_one_line_usage_errors(compare: str, why: str, tmp_path: Path) -> None:
    out_csv = tmp_path / "jobs.csv"
    code, out, err = run("sim", "run", str(TRACE), "--compare", compare, "--per-job", str(out_csv))
    assert (code, out) == (2, "")
    assert err.startswith("gctl: error: ") and err.count("\n") == 1, err
    assert why in err and "--compare" in err
    assert not out_csv.exists(), "refused before simulating"


def _per_job(tmp_path: Path, *args: str) -> tuple[dict[str, object], list[dict[str, str]]]:
    """Run with --json and --per-job; the report and the CSV rows."""
    path = tmp_path / "jobs.csv"
    code, out, err = run("sim", "run", str(TRACE), *args, "--per-job", str(path), "--json")
    assert code == 0, err
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        # the header the README documents
        header = ",".join(reader.fieldnames or ())
        assert header == "policy,job_id,gpus,submit,start,end,jct,queueing,suspends,moves"
        rows = list(reader)
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.csv"], "no temporary file left"
    return json.loads(out), rows


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def test_per_job_csv_agrees_with_the_metrics(tmp_path: Path) -> None:
    doc, rows = _per_job(tmp_path, "--cluster", "2x8", "--limit", "80", "--compare", "fifo")
    results = doc["results"]
    assert isinstance(results, list)
    jobs = results[0]["metrics"]["jobs"]
    assert jobs == 80 - len(results[0]["rejected"]) and jobs > 40
    assert len(rows) == jobs * 2
    for r in results:
        mine = [row for row in rows if row["policy"] == r["policy"]]
        m = r["metrics"]
        assert len(mine) == m["jobs"]
        assert len({row["job_id"] for row in mine}) == m["jobs"]
        jcts = [float(row["jct"]) for row in mine if row["jct"]]
        assert len(jcts) == m["finished"]
        assert _mean(jcts) == pytest.approx(m["avg_jct"], rel=1e-12)
        delays = [float(row["queueing"]) for row in mine if row["queueing"]]
        assert _mean(delays) == pytest.approx(m["avg_queueing_delay"], rel=1e-12)
        for row in mine:
            assert float(row["start"]) - float(row["submit"]) == pytest.approx(
                float(row["queueing"])
            )
            assert float(row["end"]) - float(row["submit"]) == pytest.approx(float(row["jct"]))
        counts = m["counts"]
        assert sum(int(row["suspends"]) for row in mine) == counts["suspends"]
        assert sum(int(row["moves"]) for row in mine) == counts["migrations"] + counts["requeues"]
    fifo = [row for row in rows if row["policy"] == "fifo"]
    assert all(row["suspends"] == "0" and row["moves"] == "0" for row in fifo)
    gandiva = [row for row in rows if row["policy"] == "gandiva"]
    assert sum(int(row["suspends"]) for row in gandiva) > 0, "the case must time-slice"
    assert sum(int(row["moves"]) for row in gandiva) > 0, "the case must requeue"
    assert [row["job_id"] for row in gandiva] == [row["job_id"] for row in fifo], "trace order"


def test_per_job_has_no_rows_for_jobs_too_big_for_the_cluster(tmp_path: Path) -> None:
    doc, rows = _per_job(tmp_path, "--cluster", "1x8", "--limit", "40", "--compare", "")
    result = doc["results"]
    assert isinstance(result, list)
    rejected = set(result[0]["rejected"])
    assert rejected and not rejected & {row["job_id"] for row in rows}, "too big: no row"
    assert len(rows) == 40 - len(rejected)


def test_per_job_refuses_the_trace_and_missing_folders(tmp_path: Path) -> None:
    before = TRACE.read_bytes()
    code, out, err = run("sim", "run", str(TRACE), "--limit", "5", "--per-job", str(TRACE))
    assert (code, out) == (2, "") and err.count("\n") == 1 and "--per-job" in err
    assert TRACE.read_bytes() == before
    missing = tmp_path / "nope" / "jobs.csv"
    code, out, err = run("sim", "run", str(TRACE), "--limit", "5", "--per-job", str(missing))
    assert (code, out) == (1, "")
    assert err == f"gctl: error: {missing.parent}: no such directory\n"
    code, out, err = run("sim", "run", str(TRACE), "--limit", "5", "--per-job", str(tmp_path))
    assert (code, out) == (1, "") and err.count("\n") == 1 and str(tmp_path) in err


# --- the --plot picture --------------------------------------------------------

SVG = "{http://www.w3.org/2000/svg}"


def _lines(svg: ET.Element, panel: str) -> dict[str, list[tuple[float, float]]]:
    """The polylines of one panel by their titles, as pixel points."""
    group = svg.find(f".//{SVG}g[@id='{panel}']")
    assert group is not None, panel
    return {
        str(line.findtext(f"{SVG}title")): [
            (float(x), float(y)) for x, y in (p.split(",") for p in line.attrib["points"].split())
        ]
        for line in group.iter(f"{SVG}polyline")
    }


def test_plot_draws_a_jct_cdf_and_the_queue_length_per_policy(tmp_path: Path) -> None:
    path = tmp_path / "sim.svg"
    args = ("sim", "run", str(TRACE), *SMALL, "--compare", "fifo,las", "--plot", str(path))
    code, _, err = run(*args)
    assert code == 0, err
    svg = ET.parse(path).getroot()
    assert svg.tag == f"{SVG}svg"
    cdfs, queues = _lines(svg, "jct-cdf"), _lines(svg, "queue")
    assert list(cdfs) == list(queues) == ["gandiva", "fifo", "las"]
    texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
    assert "jobs waiting" in texts and "fraction of finished jobs" in texts
    for points in cdfs.values():
        # a CDF climbs from 0 to 1: left to right, and up (pixel rows shrink)
        assert all(a[0] <= b[0] and a[1] >= b[1] for a, b in itertools.pairwise(points))
        assert points[0][1] > points[-1][1]
    tops = {points[-1][1] for points in cdfs.values()}
    assert len(tops) == 1, "every CDF ends at 1"
    assert all(len({y for _, y in points}) > 2 for points in queues.values()), "a queue built up"
    first = path.read_bytes()
    assert run(*args)[0] == 0
    assert path.read_bytes() == first, "same input, same bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["sim.svg"], "no temporary file left"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("sim.png", "PNG is not supported; give FILE.svg"),
        ("sim.txt", "not an .svg file name; give FILE.svg"),
        ("sim", "not an .svg file name; give FILE.svg"),
        ("jobs.svg", "is the --per-job file"),
    ],
)
def test_plot_refuses_names_it_cannot_write_before_simulating(
    tmp_path: Path, name: str, why: str
) -> None:
    args = ("--limit", "5", "--per-job", str(tmp_path / "jobs.svg"), "--plot", str(tmp_path / name))
    code, out, err = run("sim", "run", str(TRACE), *args)
    assert (code, out) == (2, "")
    assert err.startswith("gctl: error: ") and err.count("\n") == 1, err
    assert why in err and "--plot" in err
    assert list(tmp_path.iterdir()) == []


def test_plot_in_a_missing_folder_is_a_file_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "sim.svg"
    code, out, err = run("sim", "run", str(TRACE), "--limit", "5", "--plot", str(missing))
    assert (code, out, err) == (1, "", f"gctl: error: {missing.parent}: no such directory\n")
