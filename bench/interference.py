"""Prediction quality of the interference predictor on held-back co-runs of the pair table.

The pair table is gavel's measured throughputs
(``traces/profiles/throughputs_by_gpu_type.json.gz``, MIT): 26 single-GPU
job types (model and batch size), each alone and packed in pairs on one
K80, P100 or V100. The slow-down of a job beside a partner is its
throughput alone over its throughput packed (T'/T).

Per GPU type the unordered pairs are shuffled (seeded) and split into
``--folds`` folds; each fold is held back in turn (both orders of a pair),
:meth:`gctl.core.interference.Predictor.fit` sees the other folds only, and
predicts the held-back pairs. It prints, per GPU type, the median and p90 of
the relative error ``|predicted - measured| / measured`` for:

- the predictor (rank :data:`gctl.core.interference.RANK`);
- rank 0 (sensitivity and aggressiveness only, no interaction);
- the default (every pair at 1/0.6, as a scheduler that knows nothing).

The target (issue 21): median error <= 10 %.

Run: ``.venv/bin/python bench/interference.py [--folds 5] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import random
import statistics
import time
from pathlib import Path

from gctl.core.interference import DEFAULT_SLOWDOWN, RANK, CoRun, Predictor

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "traces" / "profiles" / "throughputs_by_gpu_type.json.gz"
GPU_TYPES = ("k80", "p100", "v100")


def load_coruns(gpu_type: str) -> list[CoRun]:
    """Every measured single-GPU pair of ``gpu_type`` as two co-runs (one per job)."""
    table = json.loads(gzip.decompress(TABLE.read_bytes()))[gpu_type]
    out: list[CoRun] = []
    for key, row in table.items():
        kind, scale = ast.literal_eval(key)
        if scale != 1:
            continue
        alone = float(row["null"])
        for other, speeds in row.items():
            if other == "null" or not speeds:
                continue
            partner, partner_scale = ast.literal_eval(other)
            if partner_scale == 1 and speeds[0] > 0:
                out.append(CoRun(kind, partner, alone / float(speeds[0])))
    return out


def _errors(train: list[CoRun], test: list[CoRun], rank: int | None) -> list[float]:
    if rank is None:
        return [abs(DEFAULT_SLOWDOWN - r.slowdown) / r.slowdown for r in test]
    model = Predictor.fit(prior=train, rank=rank)
    return [abs(model.slowdown(r.kind, r.partner).slowdown - r.slowdown) / r.slowdown for r in test]


def main() -> None:
    """Cross-validate per GPU type and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"held-back pairs, {args.folds} folds, seed {args.seed}: relative error of T'/T")
    print(f"{'gpu':5} {'co-runs':>7} {'method':>13} {'median':>7} {'p90':>7}")
    started = time.perf_counter()
    for gpu in GPU_TYPES:
        runs = load_coruns(gpu)
        pairs = sorted({tuple(sorted((r.kind, r.partner))) for r in runs})
        random.Random(args.seed).shuffle(pairs)
        methods: dict[str, int | None] = {f"rank {RANK}": RANK, "rank 0": 0, "default": None}
        errors: dict[str, list[float]] = {name: [] for name in methods}
        for fold in range(args.folds):
            held = set(pairs[fold :: args.folds])
            test = [r for r in runs if tuple(sorted((r.kind, r.partner))) in held]
            train = [r for r in runs if tuple(sorted((r.kind, r.partner))) not in held]
            for name, rank in methods.items():
                errors[name] += _errors(train, test, rank)
        for name, errs in errors.items():
            errs.sort()
            p90 = errs[int(0.9 * (len(errs) - 1))]
            print(f"{gpu:5} {len(runs):7d} {name:>13} {statistics.median(errs):7.1%} {p90:7.1%}")
    print(f"wall {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
