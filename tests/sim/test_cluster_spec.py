from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gctl.core.model import Cluster
from gctl.core.topology import Topology
from gctl.sim.cluster_spec import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    ClusterSpecError,
    node_gpus,
    parse_cluster,
    parse_memory,
)


def write(tmp_path: Path, text: str, name: str = "cluster.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def layout(cluster: Cluster, node: int = 0) -> list[tuple[int, int]]:
    return [(gpu.socket, gpu.pcie_switch) for gpu in cluster.nodes[node].gpus]


# --- compact specs ----------------------------------------------------------------------------


def test_compact_default() -> None:
    cluster = parse_cluster("12x8")
    assert len(cluster.nodes) == 12
    assert cluster.total_gpus == 96
    assert [n.name for n in cluster.nodes][:2] == ["node01", "node02"]
    assert cluster.nodes[-1].name == "node12"
    gpu = cluster.nodes[0].gpus[3]
    assert (gpu.index, gpu.type, gpu.memory_mb, gpu.nvlink) == (3, "V100", 16384, ())
    assert layout(cluster) == [(0, 0), (0, 0), (0, 1), (0, 1), (1, 2), (1, 2), (1, 3), (1, 3)]


def test_compact_with_gpu_type() -> None:
    cluster = parse_cluster("4x4:A100-80GB")
    assert cluster.total_gpus == 16
    assert {(g.type, g.memory_mb) for n in cluster.nodes for g in n.gpus} == {("A100", 81920)}
    cluster = parse_cluster(" 2X8 : V100-16GB ")
    assert cluster.nodes[0].gpus[0].type == "V100"
    assert cluster.nodes[0].gpus[0].memory_mb == 16384
    # the type is everything before the last dash
    assert parse_cluster("1x2:A100-SXM4-40G").nodes[0].gpus[0].type == "A100-SXM4"


@pytest.mark.parametrize(
    ("nodes", "names"),
    [
        (1, ["node01", "node01"]),
        (9, ["node01", "node09"]),
        (100, ["node001", "node100"]),
        (1000, ["node0001", "node1000"]),
    ],
)
def test_node_names_padded_to_count_width(nodes: int, names: list[str]) -> None:
    cluster = parse_cluster(f"{nodes}x1")
    assert [cluster.nodes[0].name, cluster.nodes[-1].name] == names
    assert len({n.name for n in cluster.nodes}) == nodes


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (1, [(0, 0)]),
        (2, [(0, 0), (1, 1)]),
        (3, [(0, 0), (0, 0), (1, 1)]),
        (4, [(0, 0), (0, 0), (1, 1), (1, 1)]),
        (6, [(0, 0), (0, 0), (0, 1), (1, 2), (1, 2), (1, 3)]),
    ],
)
def test_pcie_layout(gpus: int, expected: list[tuple[int, int]]) -> None:
    assert layout(parse_cluster(f"1x{gpus}")) == expected


@pytest.mark.parametrize("gpus", range(1, 17))
def test_pcie_layout_properties(gpus: int) -> None:
    found = [(g.socket, g.pcie_switch) for g in node_gpus(gpus)]
    sockets = [s for s, _ in found]
    assert set(sockets) == ({0} if gpus == 1 else {0, 1})
    assert abs(sockets.count(0) - sockets.count(1)) <= 1
    switch_members: dict[int, list[int]] = {}
    for index, (socket, switch) in enumerate(found):
        switch_members.setdefault(switch, []).append(index)
        assert found[switch_members[switch][0]][0] == socket  # a switch never spans sockets
    assert all(len(m) <= 2 for m in switch_members.values())


def test_nodes_share_gpu_tuple() -> None:
    cluster = parse_cluster("3x8")
    assert cluster.nodes[0].gpus is cluster.nodes[2].gpus


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("", "bad cluster spec ''"),
        ("12", "expected NODESxGPUS"),
        ("12x", "expected NODESxGPUS"),
        ("x8", "expected NODESxGPUS"),
        ("12x8x2", "expected NODESxGPUS"),
        ("-1x8", "expected NODESxGPUS"),
        ("1.5x8", "expected NODESxGPUS"),
        ("0x8", "zero nodes"),
        ("12x0", "GPUs per node must be 1..64"),
        ("1x65", "GPUs per node must be 1..64"),
        (f"{MAX_NODES + 1}x1", f"at most {MAX_NODES} nodes"),
        ("99999999999x8", "expected NODESxGPUS"),
        ("12x8:", "expected NODESxGPUS"),
        ("12x8:V100", "needs TYPE-MEMORY"),
        ("12x8:-16GB", "needs TYPE-MEMORY"),
        ("12x8:V100-16TB", "bad GPU memory '16TB'"),
        ("12x8:V100-", "bad GPU memory ''"),
        ("12x8:V100-0GB", "must be positive"),
        ("12x8:V1\x0000-16GB", "bad GPU type"),
    ],
)
def test_compact_errors(spec: str, text: str) -> None:
    with pytest.raises(ClusterSpecError) as info:
        parse_cluster(spec)
    assert text in str(info.value)
    assert "\n" not in str(info.value)


@given(st.text(max_size=40))
def test_garbage_specs_raise_only_cluster_spec_error(spec: str) -> None:
    try:
        cluster = parse_cluster(spec)
    except ClusterSpecError as exc:
        assert "\n" not in str(exc)
    else:
        assert 1 <= cluster.total_gpus <= MAX_NODES * MAX_GPUS_PER_NODE


@given(
    st.integers(1, MAX_NODES // 100),
    st.integers(1, MAX_GPUS_PER_NODE),
    st.sampled_from(["", ":V100-16GB", ":A100-80G", ":K80-12288MB"]),
    st.text(alphabet=" x:-GBM0123456789", max_size=4),
)
def test_near_valid_specs_raise_only_cluster_spec_error(
    nodes: int, gpus: int, gpu: str, noise: str
) -> None:
    for spec in (f"{nodes}x{gpus}{gpu}{noise}", f"{noise}{nodes}x{gpus}{gpu}"):
        try:
            cluster = parse_cluster(spec)
        except ClusterSpecError:
            continue
        assert cluster.total_gpus >= 1


# --- memory -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("16GB", 16384),
        ("16G", 16384),
        ("16gb", 16384),
        ("16384MB", 16384),
        ("16384M", 16384),
        ("16384", 16384),
        ("80GB", 81920),
        (" 32 GB ", 32768),
        ("12288mb", 12288),
    ],
)
def test_parse_memory(text: str, mb: int) -> None:
    assert parse_memory(text) == mb


@pytest.mark.parametrize(
    "text", ["", "GB", "16 TB", "16.5GB", "-16GB", "0", "0GB", "sixteen", "16GBB", "\u0661\u0666GB"]
)
def test_parse_memory_errors_name_the_value(text: str) -> None:
    with pytest.raises(ClusterSpecError) as info:
        parse_memory(text)
    assert repr(text) in str(info.value)


def test_parse_memory_too_large() -> None:
    with pytest.raises(ClusterSpecError, match="implausibly large"):
        parse_memory("999999999999GB")


@given(st.integers(1, 1 << 20), st.sampled_from(["GB", "G", "gb", "g"]))
def test_parse_memory_gb_round_trip(gb: int, unit: str) -> None:
    assert parse_memory(f"{gb}{unit}") == gb * 1024
    assert parse_memory(f"{gb * 1024}MB") == gb * 1024


@given(st.integers(1, 1 << 30), st.sampled_from(["", "MB", "M", "mb", "m"]))
def test_parse_memory_mb_round_trip(mb: int, unit: str) -> None:
    assert parse_memory(f"{mb}{unit}") == mb


@given(st.text(max_size=20))
def test_parse_memory_garbage_raises_only_cluster_spec_error(text: str) -> None:
    try:
        assert parse_memory(text) >= 1
    except ClusterSpecError as exc:
        assert repr(text) in str(exc)


# --- nvlink -----------------------------------------------------------------------------------


def test_dgx1_hybrid_cube_mesh() -> None:
    gpus = node_gpus(8, topology="nvlink")
    links = {(g.index, peer): n for g in gpus for peer, n in g.nvlink}
    for gpu in gpus:
        assert len(gpu.nvlink) == 4
        assert sum(n for _, n in gpu.nvlink) == 6
        assert {n for _, n in gpu.nvlink} == {1, 2}
        assert gpu.socket == (0 if gpu.index < 4 else 1)
    assert all(links[(b, a)] == n for (a, b), n in links.items())  # symmetric
    assert links[(0, 3)] == 2 and links[(0, 1)] == 1 and (0, 5) not in links
    # the scheduler's scorer sees a fully nvlinked quad within a socket
    topo = Topology(gpus)
    assert topo.score[0][3] == 200
    assert topo.score[0][5] == 10


@pytest.mark.parametrize("size", [1, 2, 4, 16])
def test_nvlink_other_sizes_all_to_all(size: int) -> None:
    gpus = node_gpus(size, topology="nvlink")
    for gpu in gpus:
        assert gpu.nvlink == tuple((p, 1) for p in range(size) if p != gpu.index)


def test_node_gpus_errors() -> None:
    with pytest.raises(ClusterSpecError, match="unknown topology 'mesh'"):
        node_gpus(8, topology="mesh")
    with pytest.raises(ClusterSpecError, match=r"1\.\.64, got 0"):
        node_gpus(0)


# --- TOML -------------------------------------------------------------------------------------

MIXED = """
# 2 DGX-1-like nodes and 3 small PCIe boxes
[[nodes]]
count = 2
name_prefix = "dgx"
gpus = 8
gpu_type = "V100"
gpu_memory = "32GB"
topology = "nvlink"

[[nodes]]
count = 3
gpus = 4
gpu_type = "P100"
gpu_memory = 12288

[[nodes]]
gpus = 2
"""


def test_toml_mixed(tmp_path: Path) -> None:
    cluster = parse_cluster(write(tmp_path, MIXED))
    names = [n.name for n in cluster.nodes]
    assert names == ["dgx01", "dgx02", "node01", "node02", "node03", "node04"]
    assert cluster.total_gpus == 2 * 8 + 3 * 4 + 2
    dgx = cluster.nodes[0].gpus
    assert {(g.type, g.memory_mb) for g in dgx} == {("V100", 32768)}
    assert len(dgx[0].nvlink) == 4
    p100 = cluster.nodes[2].gpus
    assert {(g.type, g.memory_mb, g.nvlink) for g in p100} == {("P100", 12288, ())}
    last = cluster.nodes[-1].gpus
    assert {(g.type, g.memory_mb) for g in last} == {("V100", 16384)}
    assert layout(cluster, 5) == [(0, 0), (1, 1)]


def test_toml_minimal_and_path_whitespace(tmp_path: Path) -> None:
    path = write(tmp_path, "[[nodes]]\ngpus = 1\n", "one.TOML")
    cluster = parse_cluster(f" {path} ")
    assert [n.name for n in cluster.nodes] == ["node01"]
    assert layout(cluster) == [(0, 0)]


def test_toml_width_counts_all_tables_with_prefix(tmp_path: Path) -> None:
    text = "[[nodes]]\ncount = 5\ngpus = 1\n[[nodes]]\ncount = 6\ngpus = 2\n"
    names = [n.name for n in parse_cluster(write(tmp_path, text)).nodes]
    assert names[0] == "node01" and names[5] == "node06" and names[-1] == "node11"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[nodes]]\ngpus = 8\ngpu_typ = 'V100'\n", "[[nodes]] #1: unknown key 'gpu_typ'"),
        ("[[nodes]]\ngpus = 8\n[[nodes]]\ncuont = 2\ngpus = 1\n", "#2: unknown key 'cuont'"),
        ("[[node]]\ngpus = 8\n", "unknown top-level key 'node'"),
        ("gpus = 8\n", "unknown top-level key 'gpus'"),
        ("", "no [[nodes]] tables (zero nodes)"),
        ("nodes = []\n", "no [[nodes]] tables (zero nodes)"),
        ("nodes = 3\n", "'nodes' must be an array"),
        ("nodes = [1]\n", "#1: expected a table, got 1"),
        ("[[nodes]]\ncount = 0\ngpus = 8\n", "count must be >= 1 (zero nodes), got 0"),
        ("[[nodes]]\ngpus = 0\n", "gpus must be >= 1 (zero GPUs), got 0"),
        ("[[nodes]]\ngpus = 65\n", "gpus must be at most 64, got 65"),
        ("[[nodes]]\ncount = 10001\ngpus = 1\n", "at most 10000 nodes, got 10001"),
        ("[[nodes]]\ncount = 6000\ngpus = 1\n[[nodes]]\ncount = 6000\ngpus = 1\n", "10000"),
        ("[[nodes]]\n", "missing required key 'gpus'"),
        ("[[nodes]]\ngpus = '8'\n", "gpus must be an integer, got '8'"),
        ("[[nodes]]\ngpus = true\n", "gpus must be an integer, got True"),
        ("[[nodes]]\ngpus = 8.0\n", "gpus must be an integer, got 8.0"),
        ("[[nodes]]\ngpus = 8\ngpu_memory = '16 TB'\n", "bad GPU memory '16 TB'"),
        ("[[nodes]]\ngpus = 8\ngpu_memory = 0\n", "bad GPU memory 0 MB"),
        ("[[nodes]]\ngpus = 8\ngpu_memory = 1.5\n", "gpu_memory must be a size"),
        ("[[nodes]]\ngpus = 8\ngpu_type = 'A100'\n", "gpu_memory is required too"),
        ("[[nodes]]\ngpus = 8\ngpu_type = ''\ngpu_memory = 1\n", "bad GPU type ''"),
        ("[[nodes]]\ngpus = 8\ngpu_type = 7\n", "gpu_type must be a string, got 7"),
        ("[[nodes]]\ngpus = 8\ntopology = 'mesh'\n", "unknown topology 'mesh'"),
        ("[[nodes]]\ngpus = 8\nname_prefix = '1x'\n", "bad name_prefix '1x'"),
        ("[[nodes]]\ngpus = 8\nname_prefix = 3\n", "name_prefix must be a string"),
        (
            "[[nodes]]\nname_prefix = 'node0'\ngpus = 1\n[[nodes]]\ncount = 100\ngpus = 1\n",
            "node name 'node001' comes out twice",
        ),
        ("[[nodes]\ngpus = 8\n", "invalid TOML"),
        ("[[nodes]]\ngpus = 8\ngpus = 4\n", "invalid TOML"),
        ("nodes = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ],
)
def test_toml_errors_name_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ClusterSpecError) as info:
        parse_cluster(path)
    error = str(info.value)
    assert error.startswith(f"{path}:"), error
    assert message in error, error
    assert "\n" not in error


def test_toml_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.toml")
    with pytest.raises(ClusterSpecError, match=r"absent\.toml: cluster file not found"):
        parse_cluster(path)


def test_toml_directory(tmp_path: Path) -> None:
    path = tmp_path / "dir.toml"
    path.mkdir()
    with pytest.raises(ClusterSpecError, match=r"dir\.toml: cannot read"):
        parse_cluster(str(path))


def test_toml_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b"[[nodes]]\ngpus = 8\n# \xff\n")
    with pytest.raises(ClusterSpecError, match=r"bin\.toml: "):
        parse_cluster(str(path))
