"""Build ``gctl/sim/data/profiles.json``, the job performance data the simulator ships with.

Usage::

    python tools/build_profiles.py            # rewrite the packaged JSON
    python tools/build_profiles.py --check    # exit 1 when it is out of date

Standard library only. Inputs (both under the repository's ``traces/``, see
``traces/README.md``; a ``.gz`` file is read decompressed):

* ``traces/profiles/throughputs_by_gpu_type.json.gz`` -- gavel's measured
  throughputs (stanford-futuredata/gavel, ``scheduler/simulation_throughputs.json``,
  MIT licence): steps/s per job type and GPU count on K80, P100 and V100, alone
  (``"null"``) and packed pairwise on one GPU (``[self, other]``; ``0.0`` means
  the pair was not run together, in practice because it does not fit), and
  the same job types spread across servers (``*_unconsolidated``).
* ``traces/philly_models_trace{1,2,3}.csv`` -- the Muri job lists
  (Rivendile/Muri, ``simulator/trace-data/``, Apache-2.0). Every job row
  repeats its model's per-iteration profile (Muri's ``job_time_dict``):
  ``iteration_time`` (ms) and ``resource_time_0..2`` (ms). Column 0 is the
  input stage (storage + CPU: ~700 ms for the ImageNet loaders, ~450-510 ms
  for the RL environments, 0.5 ms for the NLP jobs), column 1 the GPU stage
  (forward + backward: 160 ms BERT, 410 ms GPT-2, 8 ms DQN) and column 2 the
  network stage (0 for every 1-GPU job).

Model -> gavel job type
-----------------------
gavel has none of the trace's eight networks, so each trace model takes the
gavel job type of the nearest *kind* of network (its family, chosen by hand,
below) at the batch size whose V100 solo step time (``1000 / steps_per_s``)
is nearest, on a log scale, to the model's GPU time per iteration in the
trace (Muri ``resource_time_1`` of its 1-GPU jobs). The family fixes how the
job interferes (conv net vs attention vs RL); the batch size fixes how much
GPU work each step brings, which is what decides whether packing pays. The
resulting choice is recorded per model in the JSON. Caveats: Muri's GPU time
is GPU-only while gavel's step includes its own input pipeline (CIFAR-10 for
ResNet-18, ImageNet for ResNet-50, Multi30k for the Transformer), and the
trace does not name the GPU its times were measured on.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "gctl" / "sim" / "data" / "profiles.json"

GAVEL_FILE = "traces/profiles/throughputs_by_gpu_type.json.gz"
MURI_FILES = tuple(f"traces/philly_models_trace{i}.csv" for i in (1, 2, 3))
GPU_TYPES = ("k80", "p100", "v100")
SELECT_ON = "v100"
MULTI_GPU_COUNTS = (2, 4, 8)

# Trace model -> (family, gavel job-type prefix, why this family).
FAMILIES: dict[str, tuple[str, str, str]] = {
    "resnet18": (
        "light-image",
        "ResNet-18",
        "same network (gavel trains it on CIFAR-10, the trace on ImageNet)",
    ),
    "shufflenet_v2_x1_0": (
        "light-image",
        "ResNet-18",
        "gavel has no ShuffleNet; ResNet-18 is its light conv net",
    ),
    "vgg16": (
        "heavy-image",
        "ResNet-50",
        "gavel has no VGG; ResNet-50 (ImageNet) is its heavy image model",
    ),
    "vgg19": (
        "heavy-image",
        "ResNet-50",
        "gavel has no VGG; ResNet-50 (ImageNet) is its heavy image model",
    ),
    "bert": (
        "transformer",
        "Transformer",
        "attention model; gavel's LM is an LSTM, so its Transformer is the closer kin",
    ),
    "gpt2": (
        "transformer",
        "Transformer",
        "attention model; gavel's LM is an LSTM, so its Transformer is the closer kin",
    ),
    "dqn": ("rl", "A3C", "gavel's only reinforcement-learning job (Atari Pong)"),
    "a2c": ("rl", "A3C", "gavel's only reinforcement-learning job (Atari Pong)"),
}

SOURCES = {
    "gavel": {
        "repository": "stanford-futuredata/gavel",
        "path": "scheduler/simulation_throughputs.json",
        "license": "MIT",
        "local_copy": GAVEL_FILE,
    },
    "muri": {
        "repository": "Rivendile/Muri",
        "path": "simulator/trace-data/ (per-model profile of jobs.py job_time_dict)",
        "license": "Apache-2.0",
        "local_copy": list(MURI_FILES),
    },
}


def _key(job_type: str, gpus: int) -> str:
    """Gavel's key for a job type on ``gpus`` GPUs."""
    return f"('{job_type}', {gpus})"


def _job_type(key: str) -> tuple[str, int]:
    """Split a gavel key such as ``"('A3C', 1)"`` into name and GPU count."""
    name, _, count = key.strip("()").rpartition(", ")
    return name.strip("'"), int(count)


def _content(path: Path) -> bytes:
    """A file's bytes, decompressed when its name ends in ``.gz``."""
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix == ".gz" else raw


def _sha256(path: Path) -> str:
    """Hex SHA-256 of a file's content (uncompressed, as its source published it)."""
    return hashlib.sha256(_content(path)).hexdigest()


def _r(x: float) -> float:
    """Round for the JSON (4 decimals: far below the data's own noise)."""
    return round(x, 4)


def read_muri(root: Path) -> dict[str, dict[str, Any]]:
    """Per-model profile from the Muri traces: median over the jobs of each GPU count."""
    rows: dict[tuple[str, int], list[dict[str, str]]] = {}
    for name in MURI_FILES:
        with (root / name).open(newline="") as f:
            for row in csv.DictReader(f):
                rows.setdefault((row["model_name"], int(row["num_gpu"])), []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for model in FAMILIES:
        solo = rows[(model, 1)]
        by_gpus = {
            str(n): _r(statistics.median(float(r["iteration_time"]) for r in rs))
            for (m, n), rs in sorted(rows.items())
            if m == model
        }
        out[model] = {
            "batch_size": int(statistics.median(int(r["batch_size"]) for r in solo)),
            "gpu_time_ms": _r(statistics.median(float(r["resource_time_1"]) for r in solo)),
            "iteration_time_ms": by_gpus,
        }
    return out


def choose_job_type(gavel: dict[str, Any], prefix: str, gpu_time_ms: float) -> str:
    """Gavel 1-GPU job type with ``prefix`` whose V100 step time is nearest ``gpu_time_ms``."""
    table = gavel[SELECT_ON]
    candidates = sorted(
        name
        for name, gpus in map(_job_type, table)
        if gpus == 1 and (name == prefix or name.startswith(prefix + " "))
    )

    def distance(name: str) -> float:
        step_ms = 1000.0 / table[_key(name, 1)]["null"]
        return abs(math.log(step_ms / gpu_time_ms))

    return min(candidates, key=distance)


def pair_speeds(table: dict[str, Any], a: str, b: str) -> list[float] | None:
    """Normalised ``[speed_a, speed_b]`` of two 1-GPU job types packed on one GPU.

    Each speed is the packed throughput over the job's solo throughput. Gavel
    stores a pair under both jobs; the two records are averaged (they agree in
    the current data). None when either record is missing or has a zero.
    """
    ka, kb = _key(a, 1), _key(b, 1)
    solo_a, solo_b = table[ka]["null"], table[kb]["null"]
    ab, ba = table[ka].get(kb), table[kb].get(ka)
    if ab is None or ba is None or 0.0 in (*ab, *ba) or not solo_a or not solo_b:
        return None
    return [_r((ab[0] + ba[1]) / 2 / solo_a), _r((ab[1] + ba[0]) / 2 / solo_b)]


def build(root: Path = REPO) -> dict[str, Any]:
    """The whole profiles document, from the files under ``root`` (the repository)."""
    gavel = json.loads(_content(root / GAVEL_FILE))
    muri = read_muri(root)
    sources = json.loads(json.dumps(SOURCES))
    sources["gavel"]["sha256"] = _sha256(root / GAVEL_FILE)
    sources["muri"]["sha256"] = {n: _sha256(root / n) for n in MURI_FILES}

    models: dict[str, Any] = {}
    chosen: dict[str, str] = {}
    for model, (family, prefix, why) in FAMILIES.items():
        m = muri[model]
        job = choose_job_type(gavel, prefix, m["gpu_time_ms"])
        chosen[model] = job
        step_ms = 1000.0 / gavel[SELECT_ON][_key(job, 1)]["null"]
        cross: dict[str, dict[str, float]] = {}
        for gpu in GPU_TYPES:
            ratios = {}
            for n in MULTI_GPU_COUNTS:
                cons = gavel[gpu].get(_key(job, n), {}).get("null")
                spread = gavel[f"{gpu}_unconsolidated"].get(_key(job, n), {}).get("null")
                if cons and spread:
                    ratios[str(n)] = _r(spread / cons)
            cross[gpu] = ratios
        models[model] = {
            "family": family,
            "gavel_job_type": job,
            "mapping": (
                f"{why}; batch size by nearest V100 step time: trace GPU time "
                f"{m['gpu_time_ms']:g} ms/iteration at batch {m['batch_size']} vs "
                f"gavel {step_ms:.1f} ms/step"
            ),
            "muri": m,
            "solo_steps_per_s": {g: _r(gavel[g][_key(job, 1)]["null"]) for g in GPU_TYPES},
            "cross_node_ratio": cross,
        }

    pairs = {
        gpu: {a: {b: pair_speeds(gavel[gpu], chosen[a], chosen[b]) for b in chosen} for a in chosen}
        for gpu in GPU_TYPES
    }
    return {
        "about": (
            "Job performance data for gctl's simulator, generated by tools/build_profiles.py; "
            "do not edit. pairs[gpu][a][b] = [speed of a, speed of b] when a and b share one "
            "GPU, each relative to running alone (null: gavel never ran the pair, i.e. it does "
            "not fit). cross_node_ratio[gpu][n] = throughput of n GPUs spread across servers "
            "over n GPUs in one server."
        ),
        "sources": sources,
        "gpu_types": list(GPU_TYPES),
        "models": models,
        "pairs": pairs,
    }


def render(doc: dict[str, Any]) -> str:
    """Stable JSON text of ``doc``."""
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="folder holding traces/")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file to write")
    parser.add_argument("--check", action="store_true", help="only check that --out is current")
    args = parser.parse_args(argv)
    text = render(build(args.root))
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date; run tools/build_profiles.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
