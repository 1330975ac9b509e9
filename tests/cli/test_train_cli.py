"""``gctl sim train dl2`` as a user runs it: same bytes per seed, curves, history, errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from clikit import run
from sqlalchemy import select

from gctl.services.db import open_store
from gctl.store.engine import transaction
from gctl.store.models import JobRow, JobStateRow

REPO = Path(__file__).resolve().parents[2]
PHILLY = REPO / "traces" / "philly.csv.gz"
TINY = ("-o", "imitation=1", "-o", "imitation_epochs=1", "-o", "episodes=2", "-o", "episode_days=1")
QUICK = (*TINY, "-o", "check_every=1", "-o", "checks=1", "-o", "updates=4")
FP = ("--host-key-fingerprint", "SHA256:" + "A" * 43)


def _train(out: Path, *extra: str) -> tuple[int, str, str]:
    return run(
        "sim", "train", "dl2", str(PHILLY), "--virtual-cluster", "103959", "--window", "2d:6d",
        "--cluster", "1x8", "--elastic-fraction", "1", "--out", str(out), *QUICK, *extra,
    )  # fmt: skip


def test_the_same_seed_gives_the_same_model_bytes_and_a_learning_curve(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.npz", tmp_path / "b.npz", tmp_path / "c.npz"
    code, out, err = _train(a)
    assert code == 0, err
    assert f"model {a}" in out and "best check avg JCT" in out
    assert _train(b)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    assert _train(c, "--seed", "1")[0] == 0
    assert a.read_bytes() != c.read_bytes()
    log = json.loads(a.with_suffix(".json").read_text())
    phases = [e["phase"] for e in log["episodes"]]
    assert phases == ["imitation", "check", "actor-critic", "actor-critic"]
    assert all("check_jct" in e and e["reward"] > 0 for e in log["episodes"][2:])
    assert log["layout"]["job_features"][0] == "asked"
    svg = ET.parse(a.with_suffix(".svg")).getroot()
    lines = list(svg.iter("{http://www.w3.org/2000/svg}polyline"))
    assert svg.tag.endswith("svg") and len(lines) == 2
    assert [line.findtext("{http://www.w3.org/2000/svg}title") for line in lines] == [
        "running reward",
        "check avg JCT",
    ]


def test_a_trained_model_runs_in_the_simulator_and_training_continues_from_it(
    tmp_path: Path,
) -> None:
    model = tmp_path / "m.npz"
    assert _train(model)[0] == 0
    code, out, err = run(
        "sim", "run", str(PHILLY), "--virtual-cluster", "103959", "--window", "6d:8d",
        "--cluster", "1x8", "--elastic-fraction", "1", "--policy", "dl2",
        "-o", f"model={model}", "--compare", "fifo", "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert [r["policy"] for r in doc["results"]] == ["dl2", "fifo"]
    assert not doc["results"][0]["unfinished"]
    more = tmp_path / "more.npz"
    code, _, err = _train(more, "--init", str(model), "--json")
    assert code == 0, err
    assert more.read_bytes() != model.read_bytes()


def test_bad_requests_are_one_line_errors(tmp_path: Path) -> None:
    out, bad = tmp_path / "m.npz", tmp_path / "none.npz"
    cases = [
        (_train(out, "-o", "epochs=3"), "unknown dl2 training option 'epochs'"),
        (_train(out, "-o", "gamma=2"), "gamma and keep must be in (0, 1]"),
        (_train(out, "--init", str(bad)), "cannot read model"),
        (run("sim", "train", "fifo", str(PHILLY), "--out", str(out)), "no trainer for policy"),
        (
            run("sim", "run", str(PHILLY), "--limit", "5", "--policy", "dl2", "-o", f"model={bad}"),
            "cannot read model",
        ),
    ]
    for (code, _, err), message in cases:
        assert code != 0 and message in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
    code, _, err = run("sim", "train", "dl2", "--out", str(out))
    assert code == 2 and "TRACE or --from-store" in err


def _finish(job_id: int, start: float, ran: float) -> None:
    with transaction(open_store().engine, write=True) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        row.state, row.start_time, row.end_time = "COMPLETED", start, start + ran
        for state, at in (("RUNNING", start), ("COMPLETED", start + ran)):
            s.add(JobStateRow(job_id=job_id, state=state, at=at))


@pytest.mark.usefixtures("gdb")
def test_training_from_the_store_replays_the_sites_own_finished_jobs(tmp_path: Path) -> None:
    code, _, err = run("node", "add", "h1", "--host", "h1", *FP, "--emulate-gpus", "4xV100-16GB")
    assert code == 0, err
    ids = []
    for i in range(6):
        code, out, err = run(
            "submit", "--parsable", "--image", "train:1", "--gpus", str(1 + i % 2),
            "--elastic", "1:4", "--profile", "bert", "--", "python", "t.py",
        )  # fmt: skip
        assert code == 0, err
        ids.append(int(out))
    for i, job_id in enumerate(ids[:5]):
        _finish(job_id, 1000.0 + 600 * i, 1800.0)
    model = tmp_path / "site.npz"
    code, out, err = run(
        "sim", "train", "dl2", "--from-store", "--out", str(model), *QUICK, "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["jobs"] == 5  # the job still pending is not history
    log = json.loads(Path(doc["log"]).read_text())
    assert log["source"] == "store" and "bert" in log["layout"]["kinds"]
    with transaction(open_store().engine, write=False) as s:
        assert s.scalars(select(JobRow.state)).all().count("PENDING") == 1  # nothing changed
