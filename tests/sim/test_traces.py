from __future__ import annotations

import gzip
import hashlib
import re
import time
from pathlib import Path

import pytest

from gctl.core.model import GPU, Cluster, JobSpec, Node, Priority
from gctl.sim import traces
from gctl.sim.traces import TraceError, load_trace, split_oversized, virtual_clusters
from gctl.sim.workload import TraceJob

TRACES = Path(__file__).resolve().parents[2] / "traces"

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
MODELS_HEADER = (
    "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
    "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n"
)

# First rows of traces/philly.csv.gz (petuum/adaptdl osdi21-artifact, Apache-2.0),
# plus two made-up rows (6214e9 at 06:00:00 and a 2-GPU 11cb48 job) for ties and sorting.
PHILLY_ROWS = (
    "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
    "2017-10-09 06:13:03,2951.0,1,2951.0,6214e9\n"
    "2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0\n"
    "2017-10-09 06:13:36,2759.0,1,2759.0,6214e9\n"
    "2017-10-09 06:13:03,100.0,8,800.0,6214e9\n"
    "2017-09-29 07:58:42,10.0,2,20.0,11cb48\n"
)

# First rows of traces/philly_models_trace3.csv (Rivendile/Muri, Apache-2.0).
MODELS_ROWS = (
    "0,4,0,1046811,shufflenet_v2_x1_0,128,927475000,11174000,886,703,62,17,0\n"
    "1,4,1456000,1005573,resnet18,128,926133000,1456000,921,723,113,73,1\n"
    "2,4,352430000,3027205,bert,4,575169000,603000,190,0.5,163,18,0\n"
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def ids(jobs: list[TraceJob]) -> list[str]:
    return [job.spec.id for job in jobs]


def times(jobs: list[TraceJob]) -> list[float]:
    return [job.spec.submit_time for job in jobs]


# --- philly format --------------------------------------------------------------------------


def test_philly_sorted_shifted_and_stable(tmp_path: Path) -> None:
    jobs = load_trace(write(tmp_path, PHILLY_HEADER + PHILLY_ROWS))
    assert ids(jobs) == ["p2", "p5", "p1", "p4", "p3", "p0"]
    assert times(jobs) == [0.0, 10.0, 857671.0, 857671.0, 857704.0, 860603.0]
    first = jobs[0]
    assert first.duration == 860662.0
    assert first.spec.gpus == 1
    assert first.spec.profile is None
    assert first.spec.priority is Priority.NORMAL
    assert jobs[3].spec.gpus == 8


def test_philly_fmt_explicit_and_str_path(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    assert ids(load_trace(str(path), fmt="philly")) == ids(load_trace(path))


def test_philly_blank_lines_and_trailing_newlines_ignored(tmp_path: Path) -> None:
    text = PHILLY_HEADER + "\n" + PHILLY_ROWS + "\n\n"
    assert len(load_trace(write(tmp_path, text))) == 6


def test_philly_crlf_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "crlf.csv"
    path.write_bytes(("\ufeff" + PHILLY_HEADER + PHILLY_ROWS).replace("\n", "\r\n").encode())
    assert len(load_trace(path)) == 6


def test_philly_virtual_cluster(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    jobs = load_trace(path, virtual_cluster="6214e9")
    assert ids(jobs) == ["p1", "p4", "p3"]
    assert times(jobs) == [0.0, 0.0, 33.0]


def test_philly_virtual_cluster_unknown_lists_available(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    with pytest.raises(TraceError) as info:
        load_trace(path, virtual_cluster="nope")
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "'nope'" in message
    assert "6214e9 (3 jobs), 11cb48 (2 jobs), 6c71a0 (1 jobs)" in message
    assert "\n" not in message


def test_virtual_clusters_counts(tmp_path: Path) -> None:
    counts = virtual_clusters(write(tmp_path, PHILLY_HEADER + PHILLY_ROWS))
    assert counts == {"6214e9": 3, "11cb48": 2, "6c71a0": 1}
    assert list(counts) == ["6214e9", "11cb48", "6c71a0"]


def test_virtual_clusters_rejects_models_trace(tmp_path: Path) -> None:
    path = write(tmp_path, MODELS_HEADER + MODELS_ROWS)
    with pytest.raises(TraceError, match=rf"^{path}:1: unrecognised header .*philly header"):
        virtual_clusters(path)


def test_window_is_relative_to_first_job_and_shifts(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    jobs = load_trace(path, window=(10.0, 857700.0))
    assert ids(jobs) == ["p5", "p1", "p4"]
    assert times(jobs) == [0.0, 857661.0, 857661.0]
    # start inclusive, end exclusive
    assert ids(load_trace(path, window=(0.0, 10.0))) == ["p2"]
    assert load_trace(path, window=(1e9, 2e9)) == []


def test_window_applies_before_limit(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    assert ids(load_trace(path, window=(5.0, 1e9), limit=2)) == ["p5", "p1"]
    assert ids(load_trace(path, limit=3)) == ["p2", "p5", "p1"]
    assert load_trace(path, limit=0) == []
    assert len(load_trace(path, limit=100)) == 6


def test_window_with_virtual_cluster_is_relative_to_that_cluster(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    jobs = load_trace(path, virtual_cluster="6214e9", window=(1.0, 100.0))
    assert ids(jobs) == ["p3"]
    assert times(jobs) == [0.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"limit": -1}, "limit must be >= 0"),
        ({"window": (5.0, 5.0)}, "window start must be below its end"),
        ({"window": (6.0, 5.0)}, "window start must be below its end"),
        ({"fmt": "csv"}, "unknown trace format 'csv'"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, object], match: str) -> None:
    path = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    with pytest.raises(ValueError, match=match):
        load_trace(path, **kwargs)  # type: ignore[arg-type]


def test_virtual_cluster_with_models_trace_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, MODELS_HEADER + MODELS_ROWS)
    with pytest.raises(ValueError, match="only to philly"):
        load_trace(path, virtual_cluster="6214e9")


# --- models format --------------------------------------------------------------------------


def test_models_units_profile_priority(tmp_path: Path) -> None:
    jobs = load_trace(write(tmp_path, MODELS_HEADER + MODELS_ROWS))
    assert ids(jobs) == ["0", "1", "2"]
    assert times(jobs) == [0.0, 1456.0, 352430.0]
    assert [job.duration for job in jobs] == [927475.0, 926133.0, 575169.0]
    assert [job.spec.profile for job in jobs] == ["shufflenet_v2_x1_0", "resnet18", "bert"]
    assert [job.spec.priority for job in jobs] == [Priority.NORMAL, Priority.HIGH, Priority.NORMAL]
    assert [job.spec.gpus for job in jobs] == [4, 4, 4]


def test_models_unsorted_and_not_starting_at_zero(tmp_path: Path) -> None:
    rows = (
        "a,1,5000,1,dqn,1,1000,0,1,0,0,0,1\n"
        "b,2,3000,1,gpt2,1,2500,0,1,0,0,0,0\n"
        "c,1,5000,1,bert,1,1000,0,1,0,0,0,0\n"
    )
    jobs = load_trace(write(tmp_path, MODELS_HEADER + rows), fmt="models")
    assert ids(jobs) == ["b", "a", "c"]
    assert times(jobs) == [0.0, 2.0, 2.0]
    assert jobs[0].duration == 2.5


def test_models_without_priority_column_is_normal(tmp_path: Path) -> None:
    header = "job_id,num_gpu,submit_time,iterations,model_name,duration\n"
    jobs = load_trace(write(tmp_path, header + "7,2,0,10,vgg16,60000\n"))
    assert jobs[0].spec.priority is Priority.NORMAL
    assert jobs[0].duration == 60.0


# --- errors -----------------------------------------------------------------------------------


def assert_trace_error(path: Path, line: int | None, text: str, **kwargs: object) -> None:
    with pytest.raises(TraceError) as info:
        load_trace(path, **kwargs)  # type: ignore[arg-type]
    error = info.value
    message = str(error)
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert message.startswith(where), message
    assert text in message, message
    assert "\n" not in message
    assert error.line == line
    assert error.path == str(path)
    assert isinstance(error, ValueError)


@pytest.mark.parametrize(
    ("row", "text"),
    [
        ("2017-10-09 07:01:55,66.0,1,66.0", "expected 5 columns, got 4"),
        ("2017-10-09 07:01:55,66.0,1,66.0,11cb48,x", "expected 5 columns, got 6"),
        ("2017-10-09 07:01:55,abc,1,66.0,11cb48", "duration is not a number: 'abc'"),
        ("2017-10-09 07:01:55,nan,1,66.0,11cb48", "duration is not a finite number: 'nan'"),
        ("2017-10-09 07:01:55,inf,1,66.0,11cb48", "duration is not a finite number: 'inf'"),
        ("2017-10-09 07:01:55,0,1,0,11cb48", "duration must be > 0, got 0"),
        ("2017-10-09 07:01:55,-5.0,1,66.0,11cb48", "duration must be > 0, got -5.0"),
        ("2017-10-09 07:01:55,66.0,1.5,66.0,11cb48", "num_gpus is not an integer: '1.5'"),
        ("2017-10-09 07:01:55,66.0,,66.0,11cb48", "num_gpus is not an integer: ''"),
        ("2017-10-09 07:01:55,66.0,0,66.0,11cb48", "num_gpus must be >= 1, got 0"),
        ("2017-10-09 07:01:55,66.0,-2,66.0,11cb48", "num_gpus must be >= 1, got -2"),
        ("2017-10-09 07:01:55,66.0,1,x,11cb48", "gpu_time is not a number: 'x'"),
        ("2017-10-09 07:01:55,66.0,1,inf,11cb48", "gpu_time is not a finite number"),
        ("2017-10-09 07:01:55,66.0,1,66.0,  ", "empty cluster"),
        ("2017-13-09 07:01:55,66.0,1,66.0,11cb48", "bad timestamp '2017-13-09 07:01:55'"),
        ("2017-10-09T07:01:55,66.0,1,66.0,11cb48", "expected YYYY-MM-DD HH:MM:SS"),
        ("2017-10-09,66.0,1,66.0,11cb48", "bad timestamp '2017-10-09'"),
        ("2017-10-09 25:01:55,66.0,1,66.0,11cb48", "bad timestamp"),
        ("yesterday,66.0,1,66.0,11cb48", "bad timestamp 'yesterday'"),
        (",,,,", "bad timestamp ''"),
    ],
)
def test_philly_row_errors(tmp_path: Path, row: str, text: str) -> None:
    # the bad row is the third data row: line 4
    rows = PHILLY_ROWS.splitlines(keepends=True)
    rows.insert(2, row + "\n")
    assert_trace_error(write(tmp_path, PHILLY_HEADER + "".join(rows)), 4, text)


def test_philly_error_line_counts_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + "\n\n" + "2017-10-09 07:01:55,66.0,0,66.0,11cb48\n")
    assert_trace_error(path, 4, "num_gpus must be >= 1")


def test_philly_long_bad_value_is_shortened(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + "2017-10-09 07:01:55," + "9" * 500 + "x,1,1,a\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert "..." in str(info.value)
    assert len(str(info.value)) < 250


@pytest.mark.parametrize(
    ("row", "text"),
    [
        ("3,1,0,1,dqn,1,1000,0,1,0,0,0", "expected 13 columns, got 12"),
        ("3,x,0,1,dqn,1,1000,0,1,0,0,0,0", "num_gpu is not an integer: 'x'"),
        ("3,0,0,1,dqn,1,1000,0,1,0,0,0,0", "num_gpu must be >= 1, got 0"),
        ("3,1,soon,1,dqn,1,1000,0,1,0,0,0,0", "submit_time is not a number: 'soon'"),
        ("3,1,0,1,dqn,1,long,0,1,0,0,0,0", "duration is not a number: 'long'"),
        ("3,1,0,1,dqn,1,0,0,1,0,0,0,0", "duration must be > 0, got 0"),
        ("3,1,0,1,dqn,1,-1000,0,1,0,0,0,0", "duration must be > 0, got -1000"),
        ("3,1,0,1,,1,1000,0,1,0,0,0,0", "empty model_name"),
        ("3,1,0,1,dqn,1,1000,0,1,0,0,0,2", "priority must be 0 or 1, got '2'"),
        ("3,1,0,1,dqn,1,1000,0,1,0,0,0,", "priority must be 0 or 1, got ''"),
        (" ,1,0,1,dqn,1,1000,0,1,0,0,0,0", "empty job_id"),
        ("1,1,0,1,dqn,1,1000,0,1,0,0,0,0", "duplicate job_id '1' (first on line 3)"),
    ],
)
def test_models_row_errors(tmp_path: Path, row: str, text: str) -> None:
    path = write(tmp_path, MODELS_HEADER + MODELS_ROWS + row + "\n")
    assert_trace_error(path, 5, text)


def test_models_header_without_duration(tmp_path: Path) -> None:
    path = write(tmp_path, "job_id,num_gpu,submit_time,iterations,model_name\n0,1,0,1,dqn\n")
    assert_trace_error(path, 1, "models header lacks a 'duration' column")


def test_empty_file(tmp_path: Path) -> None:
    assert_trace_error(write(tmp_path, ""), 1, "empty file, expected a header")


def test_blank_file(tmp_path: Path) -> None:
    assert_trace_error(write(tmp_path, "\n\n"), 1, "empty file")


@pytest.mark.parametrize("header", [PHILLY_HEADER, MODELS_HEADER])
def test_header_only(tmp_path: Path, header: str) -> None:
    assert_trace_error(write(tmp_path, header), 2, "no jobs after the header")


def test_unknown_header_names_expected_headers(tmp_path: Path) -> None:
    path = write(tmp_path, "when,how_long,gpus\n1,2,3\n")
    assert_trace_error(path, 1, "unrecognised header 'when,how_long,gpus'")
    assert_trace_error(path, 1, "timestamp,duration,num_gpus,gpu_time,cluster")
    assert_trace_error(path, 1, "job_id,num_gpu,submit_time,iterations,model_name")


def test_fmt_mismatch(tmp_path: Path) -> None:
    philly = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS, "p.csv")
    models = write(tmp_path, MODELS_HEADER + MODELS_ROWS, "m.csv")
    assert_trace_error(philly, 1, "expected a models header starting", fmt="models")
    assert_trace_error(models, 1, "expected the philly header", fmt="philly")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes((PHILLY_HEADER + PHILLY_ROWS).encode() + b"\xff\xfe,1,1,1,x\n")
    assert_trace_error(path, 8, "not valid UTF-8")


def test_malformed_csv_quote(tmp_path: Path) -> None:
    path = write(tmp_path, PHILLY_HEADER + '2017-10-09 07:01:55,"66.0"x,1,66.0,11cb48\n')
    assert_trace_error(path, 2, "malformed CSV")


def test_missing_file_is_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "absent.csv")


# --- split_oversized --------------------------------------------------------------------------


def small_cluster(nodes: int, gpus: int) -> Cluster:
    return Cluster(
        tuple(Node(f"n{i}", tuple(GPU(index=g) for g in range(gpus))) for i in range(nodes))
    )


def test_split_oversized() -> None:
    jobs = [TraceJob(JobSpec(id=str(n), gpus=n), 1.0) for n in (1, 16, 17, 8, 64)]
    fits, oversized = split_oversized(jobs, small_cluster(2, 8))
    assert ids(fits) == ["1", "16", "8"]
    assert ids(oversized) == ["17", "64"]


def test_split_oversized_empty_cluster() -> None:
    jobs = [TraceJob(JobSpec(id="a", gpus=1), 1.0)]
    assert split_oversized(jobs, Cluster()) == ([], jobs)
    assert split_oversized([], small_cluster(1, 1)) == ([], [])


# --- the bundled public traces -----------------------------------------------------------------


def test_real_models_trace3() -> None:
    jobs = load_trace(TRACES / "philly_models_trace3.csv")
    assert len(jobs) == 992
    submit = times(jobs)
    assert submit == sorted(submit)
    assert submit[0] == 0.0
    assert len(set(ids(jobs))) == 992
    assert {job.spec.priority for job in jobs} == {Priority.NORMAL, Priority.HIGH}
    assert all(job.spec.profile for job in jobs)
    assert all(job.duration > 0 for job in jobs)


def test_real_philly_all_rows_valid_and_fast() -> None:
    path = TRACES / "philly.csv.gz"
    start = time.perf_counter()
    jobs = load_trace(path)
    elapsed = time.perf_counter() - start
    assert len(jobs) == 82_247
    submit = times(jobs)
    assert submit[0] == 0.0
    assert submit == sorted(submit)
    assert len(set(ids(jobs))) == 82_247
    # generous: about 0.7-1 s on a 2-vCPU CI box
    assert elapsed < 5.0
    counts = virtual_clusters(path)
    assert len(counts) == 15
    assert sum(counts.values()) == 82_247
    fits, oversized = split_oversized(jobs, small_cluster(4, 8))
    assert len(fits) + len(oversized) == 82_247
    assert all(job.spec.gpus > 32 for job in oversized)
    assert len(oversized) == 9  # 6 x 64 and 3 x 128 GPUs (README)


def test_bundled_files_match_the_checksums_their_readme_records() -> None:
    readme = (TRACES / "README.md").read_text(encoding="utf-8")
    recorded = dict(re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", readme, re.M))
    assert len(recorded) == 5
    for name, digest in recorded.items():
        raw = (TRACES / name).read_bytes()
        content = gzip.decompress(raw) if name.endswith(".gz") else raw
        assert hashlib.sha256(content).hexdigest() == digest, name


def test_gzip_trace_reads_like_the_plain_one(tmp_path: Path) -> None:
    plain = write(tmp_path, PHILLY_HEADER + PHILLY_ROWS)
    packed = tmp_path / "trace.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    # the content decides, not the name
    misnamed = tmp_path / "trace-gz.csv"
    misnamed.write_bytes(packed.read_bytes())
    assert load_trace(packed) == load_trace(plain) == load_trace(misnamed)


def test_corrupt_gzip_trace_is_a_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(gzip.compress((PHILLY_HEADER + PHILLY_ROWS).encode())[:40])
    with pytest.raises(TraceError, match="not a valid gzip file"):
        load_trace(path)


def test_gzip_bomb_is_refused_without_reading_it_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 1000)
    path = tmp_path / "bomb.csv.gz"
    path.write_bytes(gzip.compress(PHILLY_HEADER.encode() + b"\n" * 100_000))
    with pytest.raises(TraceError, match="larger than"):
        load_trace(path)
