"""Dataset affinity in placement: among nodes equally good, those caching the job's datasets."""

from __future__ import annotations

from corekit import gandiva, new_state, nodes_of, put, submit

from gctl.core import placement
from gctl.core.policies.fifo import FifoPolicy


def test_an_empty_node_caching_the_jobs_dataset_is_chosen_over_other_empty_nodes() -> None:
    state = new_state(8, 8, 8)
    state.cached = {"n2": frozenset({"imagenet"}), "n1": frozenset({"coco"})}
    submit(state, "x", 2, datasets=("imagenet",))
    submit(state, "y", 4)  # no dataset (and another size): the usual first empty node
    gandiva().schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n2"} and nodes_of(state, "y") == {"n0"}


def test_more_of_the_jobs_datasets_wins_and_a_better_node_is_never_given_up() -> None:
    state = new_state(8, 8, 8)
    state.cached = {"n1": frozenset({"a"}), "n2": frozenset({"a", "b"})}
    assert placement.free_set(state, 2, datasets=frozenset({"a", "b"}))[0][0] == "n2"
    put(state, "busy", "n0", (0, 1))  # n0: affinity 2, below height 1: step 1 takes it
    found = placement.free_set(state, 2, datasets=frozenset({"a", "b"}))
    assert found is not None and found[0][0] == "n0"


def test_best_fit_policies_prefer_the_holder_among_nodes_with_as_many_free_gpus() -> None:
    state = new_state(8, 8, 8)
    for n in ("n0", "n1", "n2"):
        put(state, f"{n}-busy", n, range(4))  # 4 free GPUs each: all equally tight
    state.cached = {"n1": frozenset({"d"})}
    submit(state, "x", 4, datasets=("d",))
    FifoPolicy().schedule(state, 1.0)
    assert nodes_of(state, "x") == {"n1"}
