"""A host no resolver can take is its node's HostError, never a crash; no network needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gctl.hosts.ssh import HostError, Pool, Target, fan_out

FP = "SHA256:" + "A" * 43


@pytest.mark.parametrize("host", ["gpu01..example.com", "x" * 64 + ".example.com", "\udcff"])
def test_a_host_the_resolver_refuses_is_that_nodes_error(host: str) -> None:
    bad = Target(node="gpu01", host=host, port=22, fingerprint=FP)
    with Pool(ssh_config=Path("/nonexistent"), connect_timeout=1) as pool:
        with pytest.raises(HostError, match=r"^gpu01: cannot reach .*idna"):
            pool.client(bad)
        with pytest.raises(HostError, match=r"^gpu01: cannot reach"):
            pool.host_key(bad)
        answers = fan_out([bad], lambda t: pool.run(t, ["true"]))
    assert isinstance(answers["gpu01"], HostError)


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ("Host gpu01\n  Port twenty-two\n", "~/.ssh/config for 'gpu01'"),
        ('Host gpu01\n  ProxyCommand nc "%h %p\n', "cannot reach"),
        ("Host gpu01\n  ProxyCommand /nonexistent/proxy %h %p\n", ".*/nonexistent/proxy"),
    ],
)
def test_a_bad_ssh_config_entry_is_that_nodes_error(
    tmp_path: Path, config: str, needle: str
) -> None:
    path = tmp_path / "config"
    path.write_text(config)
    target = Target(node="gpu01", host="gpu01", fingerprint=FP)
    with Pool(ssh_config=path, connect_timeout=1) as pool:
        with pytest.raises(HostError, match=f"^gpu01: {needle}"):
            pool.client(target)
        with pytest.raises(HostError, match=f"^gpu01: {needle}"):
            pool.host_key(target)
