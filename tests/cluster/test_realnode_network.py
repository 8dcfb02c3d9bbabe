"""The real nodes' pod network plan and switch (pure functions; the nodes themselves: test_real_nodes.py)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from localcluster.procs import ClusterError
from localcluster.realnode import Network, cluster_tag, node_specs, pick_subnet, requested_count


def test_each_node_hands_out_pod_ips_from_its_own_cidr_clear_of_the_bridge_and_node_addresses():
    net = Network(ipaddress.ip_network("10.210.7.0/24"), "gpbx", 2)
    assert [str(net.pod_cidr(i)) for i in (0, 1)] == ["10.210.7.0/25", "10.210.7.128/25"]
    assert [net.pod_range(i) for i in (0, 1)] == [("10.210.7.16", "10.210.7.127"), ("10.210.7.129", "10.210.7.254")]
    assert net.gateway == "10.210.7.1"
    assert [net.node_ip(i) for i in (0, 1)] == ["10.210.7.2", "10.210.7.3"]
    for i in (0, 1):
        first, last = (ipaddress.ip_address(a) for a in net.pod_range(i))
        assert first in net.pod_cidr(i)
        assert last in net.pod_cidr(i)
        assert all(ipaddress.ip_address(a) < first for a in (net.gateway, net.node_ip(0), net.node_ip(1)))


def test_a_subnet_is_never_one_this_machine_already_uses():
    taken = [ipaddress.ip_network("10.208.0.0/13")]  # half of the pool
    for _ in range(50):
        subnet = pick_subnet(taken)
        assert subnet.prefixlen == 24
        assert subnet.subnet_of(ipaddress.ip_network("10.216.0.0/13"))
    with pytest.raises(ClusterError, match="no free /24"):
        pick_subnet([ipaddress.ip_network("10.0.0.0/8")])


def test_names_are_unique_per_state_directory_and_fit_linux_limits(tmp_path: Path):
    a, b = cluster_tag(tmp_path / "a"), cluster_tag(tmp_path / "b")
    assert a != b
    assert len(f"gpb{a}") <= 15  # a Linux interface name
    assert [(s.name, s.gputype, s.gpus) for s in node_specs(2)] == [("real-p100-1", "p100", 4), ("real-k2-1", "k2", 4)]
    assert len({s.name for s in node_specs(5)}) == 5


@pytest.mark.parametrize(("value", "count"), [("", 0), ("0", 0), ("no", 0), ("1", 2), ("true", 2), ("3", 3)])
def test_the_switch(value, count):
    assert requested_count({"GPUPORTAL_REAL_NODES": value}) == count


def test_a_bad_switch_is_named():
    with pytest.raises(ClusterError, match="GPUPORTAL_REAL_NODES"):
        requested_count({"GPUPORTAL_REAL_NODES": "lots"})
