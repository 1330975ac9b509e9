"""The job SDK (gctl.job): the contract between a training loop and gctl."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gctl import job

SDK = Path(job.__file__)


@pytest.fixture
def restore_signals() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _run(tmp_path: Path, **kw: float) -> job.Run:
    env = {
        "GCTL_JOB_ID": "42",
        "GCTL_JOB_DIR": str(tmp_path / "j"),
        "GCTL_GPUS": "2",
        "GCTL_GPU_UUIDS": "GPU-a,GPU-b",
        "GCTL_EMULATED_GPUS": "1",
        "GCTL_ATTEMPT": "3",
    }
    return job.Run(env, **kw)


def test_environment_and_first_start(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert (run.job_id, run.attempt, run.gpus, run.gpu_uuids) == (42, 3, 2, ["GPU-a", "GPU-b"])
    assert run.emulated_gpus and run.checkpoint_dir.is_dir()
    assert run.resume() is None and not run.checkpoint_due and not run.must_exit


def test_progress_is_throttled_unless_forced(tmp_path: Path) -> None:
    run = _run(tmp_path, report_every=3600)
    progress = run.dir / job.PROGRESS_FILE
    run.step(1, 10)
    first = json.loads(progress.read_text())
    assert first["step"] == 1 and "rate" not in first  # no rate yet: none, not 0
    run.step(2, 10)
    assert json.loads(progress.read_text())["step"] == 1  # within report_every: not written
    run.step(3, 10, force=True)
    got = json.loads(progress.read_text())
    assert (got["step"], got["steps"], got["sdk"]) == (3, 10, job.SDK_VERSION)
    assert "rate" not in got  # 3 steps since the start: too few for a steady rate
    for step in range(4, 12):
        run.step(step, 20, force=True)
    full = json.loads(progress.read_text())  # a full window of 11 steps
    assert full["rate"] > 0 and full["span"] > 0
    assert full["rate"] * full["span"] == pytest.approx(10)  # 10 steps over the span


def test_only_the_final_report_says_the_work_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_signals: None
) -> None:
    """gctl records an exit 0 as COMPLETED only after it (issue 17)."""
    monkeypatch.setenv("GCTL_JOB_DIR", str(tmp_path / "j"))
    progress = tmp_path / "j" / job.PROGRESS_FILE
    run = job.start()  # a first run says at once that it uses the SDK
    first = json.loads(progress.read_text())
    assert (first["step"], first["sdk"]) == (0, job.SDK_VERSION) and "done" not in first
    run.step(3, 10, force=True)
    assert "done" not in json.loads(progress.read_text())
    run.step(10, 10)  # the last step: reported whatever the throttle, as done
    last = json.loads(progress.read_text())
    assert (last["step"], last["done"]) == (10, True)
    run.step(4, None, force=True)
    assert "done" not in json.loads(progress.read_text())
    run.finish()  # without a step: the last report's, kept
    final = json.loads(progress.read_text())
    assert (final["step"], final["done"], final["sdk"]) == (4, True, job.SDK_VERSION)
    job.start(listen=False)  # a restart keeps the report it finds
    assert json.loads(progress.read_text()) == final


def test_signals_ask_for_checkpoints_at_batch_boundaries(
    tmp_path: Path, restore_signals: None
) -> None:
    run = _run(tmp_path).listen()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert run.step(5) and run.checkpoint_due and not run.must_exit
    run.checkpoint({"step": 5, "lr": 0.1})
    assert not run.checkpoint_due  # served
    assert _run(tmp_path).resume() == {"step": 5, "lr": 0.1}
    os.kill(os.getpid(), signal.SIGTERM)
    assert run.checkpoint_due and run.must_exit
    run.checkpoint({"step": 6})
    assert run.must_exit and json.loads((run.dir / job.CHECKPOINT_FILE).read_text())["step"] == 6


def test_sdk_runs_alone_in_an_image_without_gctl(tmp_path: Path) -> None:
    """Only gctl/__init__.py and gctl/job.py are copied, as into the test image."""
    tree = ast.parse(SDK.read_text())
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {
        (n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
    }
    assert imported <= set(sys.stdlib_module_names)
    ast.parse(SDK.read_text(), feature_version=(3, 8))
    lib = tmp_path / "lib" / "gctl"
    lib.mkdir(parents=True)
    shutil.copy(SDK.with_name("__init__.py"), lib)
    shutil.copy(SDK, lib)
    loop = (
        "from gctl import job\n"
        "run = job.start()\n"
        "start = (run.resume() or {}).get('step', 0)\n"
        "for s in range(start + 1, start + 4):\n"
        "    run.step(s, 100, force=True)\n"
        "run.checkpoint({'step': s})\n"
        "print(s)\n"
    )
    env = {
        "PYTHONPATH": str(tmp_path / "lib"),
        "GCTL_JOB_DIR": str(tmp_path / "j"),
        "PATH": os.environ["PATH"],
    }
    for expect in ("3", "6"):  # the second run resumes from the first one's checkpoint
        out = subprocess.run([sys.executable, "-S", "-c", loop], env=env, cwd=tmp_path,
                             capture_output=True, text=True, check=True)  # fmt: skip
        assert out.stdout.strip() == expect


def _split(run: job.Run, version: int, plan: list[tuple[list[int], int | None]]) -> None:
    """Write split.json as the daemon does, with a fresh mtime."""
    path = run.dir / job.SPLIT_FILE
    path.write_text(json.dumps({"version": version, "plan": plan}))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + version))


def _batch(run: job.Run) -> dict[str, object]:
    return dict(json.loads((run.dir / job.PROGRESS_FILE).read_text())["batch"])


def test_local_batches_follow_gctls_plan_and_report_each_workers_times(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.global_batch = 256
    assert run.batch_sizes() == [128, 128]  # no split from gctl yet: equal
    _split(run, 1, [([128, 128], 2), ([96, 160], 2), ([160, 96], None)])
    seen = []
    for step in range(1, 8):
        seen.append(run.batch_sizes())
        b0, b1 = run.batch_sizes()
        run.step(step, 100, force=True, worker_times=[0.01 * b0, 0.003 * b1])
    # the plan is taken at the first step boundary, each split for its steps, the last held
    assert seen == [[128, 128], [128, 128], [128, 128], [96, 160], [96, 160], [160, 96], [160, 96]]
    report = _batch(run)
    assert (report["global"], report["local"], report["version"]) == (256, [160, 96], 1)
    points = {(w, b): (round(t, 6), n) for w, b, t, n in report["points"]}  # type: ignore[attr-defined]
    assert points[(0, 96)] == (0.96, 2) and points[(1, 160)] == (0.48, 2)
    assert points[(0, 128)] == (1.28, 3)


def test_a_split_that_does_not_fit_or_is_old_is_ignored(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.global_batch = 100
    _split(run, 2, [([60, 40], None)])
    run.step(1, force=True)
    assert run.batch_sizes() == [60, 40]
    for bad in ([[70, 40], None], [[100], None], [[100, 0], None]):
        _split(run, 3, [bad])  # type: ignore[list-item]
        run.step(2, force=True)
        assert run.batch_sizes() == [60, 40]
    _split(run, 1, [([10, 90], None)])  # older than what it runs
    run.step(3, force=True)
    assert run.batch_sizes() == [60, 40]
    (run.dir / job.SPLIT_FILE).write_text("{not json")
    run.step(4, force=True)
    assert run.batch_sizes() == [60, 40]


def test_start_refuses_a_batch_smaller_than_its_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_signals: None
) -> None:
    monkeypatch.setenv("GCTL_JOB_DIR", str(tmp_path / "j"))
    monkeypatch.setenv("GCTL_GPUS", "4")
    with pytest.raises(ValueError, match="batch of 2 cannot be split over 4 GPUs"):
        job.start(batch=2)
    assert job.start(batch=8).batch_sizes() == [2, 2, 2, 2]


class _FakeCuda:
    """A stand-in for ``torch.cuda`` (no torch here): two 16 GiB GPUs; records the fractions."""

    def __init__(self) -> None:
        self.fractions: list[tuple[float, int]] = []

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 2

    def get_device_properties(self, i: int) -> Any:
        return types.SimpleNamespace(total_memory=16 * 2**30)

    def set_per_process_memory_fraction(self, fraction: float, device: int) -> None:
        self.fractions.append((fraction, device))


class _FakeTfConfig:
    """A stand-in for ``tensorflow.config``; ``started`` refuses, as TF does once its GPUs run."""

    def __init__(self, started: bool) -> None:
        self.started = started
        self.limits: list[tuple[str, int]] = []
        self.LogicalDeviceConfiguration = lambda memory_limit: memory_limit

    def list_physical_devices(self, kind: str) -> list[str]:
        return ["GPU:0"] if kind == "GPU" else []

    def set_logical_device_configuration(self, gpu: str, config: list[int]) -> None:
        if self.started:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        self.limits.append((gpu, config[0]))


def test_the_gpu_memory_limit_is_handed_to_the_frameworks_already_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda = _FakeCuda()
    tf_config = _FakeTfConfig(started=False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "tensorflow", types.SimpleNamespace(config=tf_config))
    monkeypatch.setenv("GCTL_JOB_DIR", str(tmp_path / "j"))
    monkeypatch.setenv("GCTL_GPU_MEM_MB", "4096")
    run = job.start(listen=False)
    assert run.gpu_mem_mb == 4096
    assert cuda.fractions == [(0.25, 0), (0.25, 1)]  # 4 GiB of each 16 GiB GPU
    assert tf_config.limits == [("GPU:0", 4096)]
    tf_config.started = True
    assert job.limit_gpu_memory(8192) == ["torch"]  # too late for TensorFlow: not claimed
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delitem(sys.modules, "tensorflow")
    assert job.limit_gpu_memory(8192) == []  # nothing imported: nothing imported here either
    assert "torch" not in sys.modules and "tensorflow" not in sys.modules
