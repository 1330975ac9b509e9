"""The dl2 network: its hand-written gradients, and its model files (exact bytes, refusals)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gctl_dl2.features import GLOBAL_FEATURES, JOB_FEATURES, Layout, LayoutError
from gctl_dl2.network import PARAMS, Network

LAYOUT = Layout(("bert", "vgg16"), hidden=8, hidden2=5)


def _batch(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    b, n = 3, 4
    x = rng.normal(size=(b, n, LAYOUT.width))
    valid = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=float)
    mask = np.array([[1, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=bool)
    return x, valid, mask, rng.normal(size=(b, LAYOUT.globals))


def _loss(net: Network, batch: tuple[np.ndarray, ...], w: np.ndarray, u: np.ndarray) -> float:
    pi, value, _ = net.batch_forward(*batch)
    logp = np.log(np.where(pi > 0, pi, 1.0))
    return float((w * logp).sum() + (u * value).sum())


def test_backward_matches_finite_differences() -> None:
    rng = np.random.default_rng(1)
    net = Network.fresh(LAYOUT, 3)
    batch = _batch(rng)
    pi, value, cache = net.batch_forward(*batch)
    w = rng.normal(size=pi.shape) * (pi > 0)  # weights on the log-probabilities of legal actions
    u = rng.normal(size=value.shape)
    # d/dlogits of sum w*log(pi) = w - pi * sum(w)
    dlogits = w - pi * w.sum(axis=1, keepdims=True)
    grads = net.backward(cache, np.where(pi > 0, dlogits, 0.0), u)
    eps = 1e-6
    for name in PARAMS:
        param = net.params[name]
        for idx in list(np.ndindex(param.shape))[:12]:
            old = param[idx]
            param[idx] = old + eps
            up = _loss(net, batch, w, u)
            param[idx] = old - eps
            down = _loss(net, batch, w, u)
            param[idx] = old
            assert grads[name][idx] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-6)


def test_probabilities_cover_stop_and_the_jobs_that_may_take_a_gpu_only() -> None:
    net = Network.fresh(LAYOUT, 0)
    x, valid, mask, g = _batch(np.random.default_rng(0))
    pi, _, _ = net.batch_forward(x, valid, mask, g)
    assert np.allclose(pi.sum(axis=1), 1.0)
    assert np.all(pi[:, 1:][~mask] == 0.0)
    assert pi[2, 0] == 1.0  # nobody may take a GPU: stop is certain


def test_the_same_parameters_give_the_same_file_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    Network.fresh(LAYOUT, 7).save(a)
    Network.fresh(LAYOUT, 7).save(b)
    assert a.read_bytes() == b.read_bytes()
    Network.fresh(LAYOUT, 8).save(b)
    assert a.read_bytes() != b.read_bytes()
    back = Network.load(a)
    assert back.layout == LAYOUT
    for name in PARAMS:
        assert np.array_equal(back.params[name], Network.fresh(LAYOUT, 7).params[name])


def _rewrite(src: Path, dst: Path, change: dict[str, bytes | None]) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = change.get(item.filename, zin.read(item.filename))
            if data is not None:
                zout.writestr(item.filename, data)


def _npy(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr)
    return buf.getvalue()


def test_models_that_do_not_match_the_code_are_refused_with_the_reason(tmp_path: Path) -> None:
    good = tmp_path / "good.npz"
    Network.fresh(LAYOUT, 0).save(good)
    doc = json.loads(LAYOUT.to_json())
    cases = {
        "format": ({**doc, "format": 99}, "format 99"),
        "features": ({**doc, "job_features": list(JOB_FEATURES[:-1])}, "other input features"),
        "globals": ({**doc, "global_features": [*GLOBAL_FEATURES, "x"]}, "other input features"),
    }
    for name, (layout, message) in cases.items():
        bad = tmp_path / f"{name}.npz"
        _rewrite(good, bad, {"layout.npy": _npy(np.array(json.dumps(layout)))})
        with pytest.raises(LayoutError, match=message):
            Network.load(bad)
    shape = tmp_path / "shape.npz"
    _rewrite(good, shape, {"W1.npy": _npy(np.zeros((3, 3)))})
    with pytest.raises(LayoutError, match="parameter W1 has shape"):
        Network.load(shape)
    missing = tmp_path / "missing.npz"
    _rewrite(good, missing, {"ws.npy": None})
    with pytest.raises(LayoutError, match="lacks parameter"):
        Network.load(missing)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, layout=np.array([{"a": 1}], dtype=object))
    with pytest.raises(LayoutError, match=r"cannot read model|layout unreadable"):
        Network.load(pickled)
    text = tmp_path / "text.npz"
    text.write_text("not a model\n")
    with pytest.raises(LayoutError, match="cannot read model"):
        Network.load(text)


def test_a_kind_never_trained_on_uses_the_default_slot() -> None:
    assert LAYOUT.kind_index("vgg16") == 1
    assert LAYOUT.kind_index("llama-70b") == LAYOUT.kind_index(None) == 2
