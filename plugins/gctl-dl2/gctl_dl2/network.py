"""The DL2 policy network in numpy: a shared per-job scorer, a stop action and a value head.

For each job row ``x``: ``h = relu(x W1 + b1)`` and its score ``h . w2 + c2``.
The mean of the rows' ``h`` with the global features ``g`` gives
``q = relu([mean h, g] Ws + bs)``, from which come the stop action's score
``q . ws + cs`` and the value estimate ``q . wv + cv``. The policy is the
softmax over the stop action and the scores of the jobs that may take a GPU.

DL2 scores a fixed number of job slots with one flat network; scoring every
job with shared weights instead takes any number of jobs, and lets a
decision update one row per action (the job given a GPU) instead of
recomputing the whole input, which keeps an interval's inference in
milliseconds at a thousand jobs.

The model file is an ``npz`` archive written byte for byte the same for the
same parameters (fixed member times), read with ``allow_pickle=False``.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gctl_dl2.features import Layout, LayoutError

PARAMS = ("W1", "b1", "w2", "c2", "Ws", "bs", "ws", "cs", "wv", "cv")
"""Parameter names, in file order."""

_EPOCH = (1980, 1, 1, 0, 0, 0)


def shapes(layout: Layout) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape for ``layout``."""
    f, h, h2, g = layout.width, layout.hidden, layout.hidden2, layout.globals
    return {
        "W1": (f, h), "b1": (h,), "w2": (h,), "c2": (1,),
        "Ws": (h + g, h2), "bs": (h2,), "ws": (h2,), "cs": (1,), "wv": (h2,), "cv": (1,),
    }  # fmt: skip


def _relu(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(x, 0.0)
    return out


@dataclass(slots=True)
class Network:
    """The parameters and their shapes for one layout."""

    layout: Layout
    params: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def fresh(cls, layout: Layout, seed: int) -> Network:
        """Random initial weights (He-scaled), the stop score starting a little above the jobs'."""
        rng = np.random.default_rng(seed)
        f, h, h2, g = layout.width, layout.hidden, layout.hidden2, layout.globals

        def he(rows: int, cols: int) -> np.ndarray:
            return rng.normal(0.0, np.sqrt(2.0 / rows), (rows, cols))

        return cls(
            layout,
            {
                "W1": he(f, h),
                "b1": np.zeros(h),
                "w2": rng.normal(0.0, 0.1, h),
                "c2": np.zeros(1),
                "Ws": he(h + g, h2),
                "bs": np.zeros(h2),
                "ws": rng.normal(0.0, 0.1, h2),
                "cs": np.zeros(1),
                "wv": rng.normal(0.0, 0.1, h2),
                "cv": np.zeros(1),
            },
        )

    # ---- one decision, row by row ------------------------------------

    def hidden(self, x: np.ndarray) -> np.ndarray:
        """``h`` of job rows (one row or a matrix)."""
        p = self.params
        return _relu(x @ p["W1"] + p["b1"])

    def score(self, h: np.ndarray) -> np.ndarray:
        """Job scores from their ``h``."""
        p = self.params
        out: np.ndarray = h @ p["w2"] + p["c2"][0]
        return out

    def tracker(self, h: np.ndarray, g: np.ndarray) -> Head:
        """The stop score and value of a decision over rows ``h`` and globals ``g``."""
        return Head(self, h, g)

    # ---- a batch of decisions, for training ---------------------------

    def batch_forward(
        self, x: np.ndarray, valid: np.ndarray, mask: np.ndarray, g: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Action probabilities (stop first) and values of a padded batch, with what backward needs.

        ``x`` is (B, N, F), ``valid`` (B, N) marks real rows, ``mask`` (B, N)
        the jobs that may take a GPU, ``g`` (B, G).
        """
        p = self.params
        h = _relu(x @ p["W1"] + p["b1"]) * valid[..., None]
        s = h @ p["w2"] + p["c2"][0]
        n = np.maximum(valid.sum(axis=1), 1.0)
        z = np.concatenate([h.sum(axis=1) / n[:, None], g], axis=1)
        q = _relu(z @ p["Ws"] + p["bs"])
        stop = q @ p["ws"] + p["cs"][0]
        value = q @ p["wv"] + p["cv"][0]
        logits = np.concatenate([stop[:, None], np.where(mask, s, -np.inf)], axis=1)
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        pi = e / e.sum(axis=1, keepdims=True)
        cache = {"x": x, "h": h, "n": n, "z": z, "q": q, "mask": mask}
        return pi, value, cache

    def backward(
        self, cache: dict[str, np.ndarray], dlogits: np.ndarray, dvalue: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Gradients of the parameters from those of the logits (B, N+1) and values (B,)."""
        p = self.params
        x, h, n, z, q, mask = (cache[k] for k in ("x", "h", "n", "z", "q", "mask"))
        hid = self.layout.hidden
        dstop = dlogits[:, 0]
        ds = np.where(mask, dlogits[:, 1:], 0.0)
        grads: dict[str, np.ndarray] = {
            "ws": q.T @ dstop,
            "cs": np.array([dstop.sum()]),
            "wv": q.T @ dvalue,
            "cv": np.array([dvalue.sum()]),
        }
        dq = (dstop[:, None] * p["ws"] + dvalue[:, None] * p["wv"]) * (q > 0)
        grads["Ws"] = z.T @ dq
        grads["bs"] = dq.sum(axis=0)
        dmean = (dq @ p["Ws"].T)[:, :hid] / n[:, None]
        grads["w2"] = np.einsum("bnh,bn->h", h, ds)
        grads["c2"] = np.array([ds.sum()])
        dh = (ds[..., None] * p["w2"] + dmean[:, None, :]) * (h > 0)
        flat = dh.reshape(-1, hid)
        grads["W1"] = x.reshape(-1, x.shape[-1]).T @ flat
        grads["b1"] = flat.sum(axis=0)
        return grads

    # ---- files -----------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the model (layout and parameters) to ``path``, replacing it atomically."""
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            arrays = {"layout": np.array(self.layout.to_json())}
            arrays.update((k, self.params[k]) for k in PARAMS)
            for name, arr in arrays.items():
                member = io.BytesIO()
                np.lib.format.write_array(member, np.asarray(arr), allow_pickle=False)
                info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, member.getvalue())
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(buf.getvalue())
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Network:
        """Read a model file; :class:`LayoutError` when it is not one this code can run."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if "layout" not in data.files:
                    raise LayoutError(f"{path}: not a gctl-dl2 model (no layout)")
                layout = Layout.from_json(str(data["layout"]))
                params = {k: np.array(data[k], dtype=np.float64) for k in PARAMS}
        except LayoutError as exc:
            raise LayoutError(f"{path}: {exc}") from None
        except KeyError as exc:
            raise LayoutError(f"{path}: model lacks parameter {exc}") from None
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise LayoutError(f"{path}: cannot read model: {exc}") from None
        net = cls(layout, params)
        expected = shapes(layout)
        for k in PARAMS:
            if params[k].shape != expected[k]:
                raise LayoutError(
                    f"{path}: parameter {k} has shape {params[k].shape},"
                    f" its layout needs {expected[k]}"
                )
        return net


class Head:
    """The stop score and value of one decision, updated as its rows and its free GPUs change.

    ``[mean h, g] Ws`` is kept as its two parts: one row's change moves the
    first by that row's change, and only the first global feature (the GPUs
    still free) changes during a decision, so an action costs a few vector
    operations instead of a pass over every row.
    """

    def __init__(self, net: Network, h: np.ndarray, g: np.ndarray) -> None:
        """Start from rows ``h`` and globals ``g``."""
        p, hid = net.params, net.layout.hidden
        self._p = p
        self._wh, self._wg = p["Ws"][:hid], p["Ws"][hid:]
        self._n = max(len(h), 1)
        self._rows = h.sum(axis=0) @ self._wh
        self._g0 = float(g[0])
        self._globals = g @ self._wg + p["bs"]

    def row_changed(self, old: np.ndarray, new: np.ndarray) -> None:
        """A row's ``h`` changed from ``old`` to ``new``."""
        self._rows += (new - old) @ self._wh

    def scores(self, free: float) -> tuple[float, float]:
        """The stop action's score and the value, with the first global feature at ``free``."""
        pre = self._rows / self._n + self._globals + (free - self._g0) * self._wg[0]
        q = _relu(pre)
        p = self._p
        return float(q @ p["ws"] + p["cs"][0]), float(q @ p["wv"] + p["cv"][0])
