import importlib.util
import itertools
import json
import statistics
from importlib.resources import files
from pathlib import Path
from types import ModuleType

import pytest

from gctl.core.topology import Spread
from gctl.sim.profiles import (
    DEFAULT,
    DEFAULT_LOCALITY,
    DEFAULT_PACKED_SPEED,
    GPU_MEMORY_MB,
    known_models,
    locality_factor,
    migration_cost_s,
    packed_speeds,
    profile_for,
    suspend_resume_cost_s,
)

REPO = Path(__file__).resolve().parents[2]
TRACE_MODELS = (
    "vgg16",
    "vgg19",
    "resnet18",
    "shufflenet_v2_x1_0",
    "bert",
    "gpt2",
    "dqn",
    "a2c",
)
GPU_TYPES = ("k80", "p100", "v100")


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_profiles", REPO / "tools" / "build_profiles.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _packaged_text() -> str:
    return files("gctl.sim").joinpath("data", "profiles.json").read_text(encoding="utf-8")


def test_packaged_json_matches_what_the_builder_regenerates():
    builder = _builder()
    assert builder.render(builder.build(REPO)) == _packaged_text()


def test_json_records_its_sources():
    doc = json.loads(_packaged_text())
    gavel = doc["sources"]["gavel"]
    assert gavel["repository"] == "stanford-futuredata/gavel"
    assert gavel["path"] == "scheduler/simulation_throughputs.json"
    assert gavel["license"] == "MIT"
    assert doc["sources"]["muri"]["repository"] == "Rivendile/Muri"


def test_every_trace_model_is_known():
    assert set(known_models()) == set(TRACE_MODELS)
    for model in TRACE_MODELS:
        profile = profile_for(model)
        assert profile.name == model
        assert profile is not DEFAULT
        assert 0.0 < profile.gpu_util <= 1.0
        assert 0 < profile.gpu_mem_mb <= GPU_MEMORY_MB["v100"]
        assert profile.checkpoint_mb > 0


def test_model_names_are_case_insensitive():
    assert profile_for(" VGG16 ") is profile_for("vgg16")


@pytest.mark.parametrize("model", [None, "", "inception_v3", "no-such-model"])
def test_unknown_model_gets_the_default(model):
    assert profile_for(model) is DEFAULT
    assert locality_factor(model, Spread.CROSS_NODE) == DEFAULT.locality[Spread.CROSS_NODE]
    assert packed_speeds(model, "no-such-model") == (DEFAULT_PACKED_SPEED, DEFAULT_PACKED_SPEED)
    assert packed_speeds(model, "resnet18") == (DEFAULT_PACKED_SPEED, DEFAULT_PACKED_SPEED)


def test_default_profile_is_the_rounded_median_trace_model():
    """A job without a model behaves like a typical trace job, as the module documents."""
    known = [profile_for(m) for m in known_models()]
    assert len(known) == 8
    assert DEFAULT.gpu_util == round(statistics.median(p.gpu_util for p in known), 2)
    assert DEFAULT.gpu_mem_mb == round(statistics.median(p.gpu_mem_mb for p in known))
    assert DEFAULT.checkpoint_mb == round(statistics.median(p.checkpoint_mb for p in known))
    assert DEFAULT.locality == DEFAULT_LOCALITY


def test_utilisation_follows_the_trace_light_below_heavy():
    light = max(profile_for(m).gpu_util for m in ("resnet18", "shufflenet_v2_x1_0", "dqn", "a2c"))
    heavy = min(profile_for(m).gpu_util for m in ("vgg16", "vgg19", "bert", "gpt2"))
    assert light < 0.2 < 0.6 < heavy


@pytest.mark.parametrize("gpu_type", GPU_TYPES)
def test_packed_speeds_in_range_and_symmetric(gpu_type):
    models = (*TRACE_MODELS, None)
    for a, b in itertools.product(models, repeat=2):
        ab = packed_speeds(a, b, gpu_type=gpu_type)
        ba = packed_speeds(b, a, gpu_type=gpu_type)
        if ab is None:
            assert ba is None
            continue
        assert ba == (ab[1], ab[0])
        assert all(0.0 < s <= 1.5 for s in ab), (a, b, ab)


def test_light_pairs_gain_on_v100():
    for a, b in [
        ("resnet18", "resnet18"),
        ("shufflenet_v2_x1_0", "shufflenet_v2_x1_0"),
        ("resnet18", "shufflenet_v2_x1_0"),
    ]:
        speeds = packed_speeds(a, b)
        assert speeds is not None
        assert sum(speeds) > 1.2, (a, b, speeds)


def test_heavy_image_pairs_lose_on_v100():
    for a, b in [("vgg16", "vgg16"), ("vgg19", "vgg19"), ("vgg16", "vgg19")]:
        speeds = packed_speeds(a, b)
        assert speeds is None or sum(speeds) < 1.05, (a, b, speeds)


def test_unpackable_pairs():
    # gavel never ran its largest Transformer twice on one GPU; memory rules out gpt2 + vgg16.
    assert packed_speeds("gpt2", "gpt2") is None
    assert packed_speeds("gpt2", "vgg16") is None
    assert packed_speeds("gpt2", None) is None
    assert packed_speeds("dqn", "gpt2") is not None


def test_unknown_gpu_type_is_rejected():
    with pytest.raises(ValueError):
        packed_speeds("vgg16", "vgg16", gpu_type="a100")


@pytest.mark.parametrize("model", [*TRACE_MODELS, None])
def test_locality_is_monotone_and_bounded(model):
    factors = [locality_factor(model, s) for s in Spread]
    assert factors[0] == 1.0
    assert all(0.0 < f <= 1.0 for f in factors)
    assert all(x >= y for x, y in itertools.pairwise(factors)), factors


def test_gandiva_locality_figures():
    assert locality_factor("vgg16", Spread.CROSS_SOCKET) == 0.6
    assert locality_factor("resnet18", Spread.CROSS_SOCKET) == 1.0
    assert locality_factor("vgg16", Spread.SAME_SWITCH) == 1.0


@pytest.mark.parametrize("model", [*TRACE_MODELS, None])
def test_costs_follow_gandiva(model):
    assert 1.0 <= migration_cost_s(model) <= 3.6
    assert 0.1 <= suspend_resume_cost_s(model) <= 1.0


def test_costs_grow_with_checkpoint():
    assert migration_cost_s("gpt2") == pytest.approx(3.5, abs=0.1)  # ~1.4 GB checkpoint
    assert migration_cost_s("resnet18") < 1.2
    assert suspend_resume_cost_s("gpt2") > suspend_resume_cost_s("resnet18")
