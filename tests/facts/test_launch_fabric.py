"""RoCE detection from fake sysfs trees: per-node GID index, DOWN ports, errors."""

from __future__ import annotations

import pytest

from sparkfleet.facts.fabric import FabricError, detect, scan_ports
from support.launch_fleet import fake_roce_sysfs

V2, V1 = "RoCE v2", "IB/RoCE v1"


def node(tmp_path, name, ip, idx, second_ip=None, second_idx=None, down=False):
    gids = {
        0: ("fe80::1", V1, "enp1s0f0np0"),
        1: ("fe80::1", V2, "enp1s0f0np0"),
        idx - 1: (ip, V1, "enp1s0f0np0"),
        idx: (ip, V2, "enp1s0f0np0"),
    }
    hcas = {"rocep1s0f0": {"gids": gids}}
    if second_ip:
        hcas["roceP2p1s0f0"] = {"gids": {second_idx: (second_ip, V2, "enP2p1s0f0np0")}}
    hcas["rocep1s0f1"] = {
        "state": "DOWN" if down else "ACTIVE",
        "gids": {idx: ("10.9.9.9", V2, "enp1s0f1np1")},
    }
    return fake_roce_sysfs(tmp_path / name, hcas)


def test_gid_index_matches_fabric_ip_per_node(tmp_path):
    a = detect(scan_ports(node(tmp_path, "dgx1", "192.168.100.11", 3, down=True)), "192.168.100.11")
    b = detect(scan_ports(node(tmp_path, "dgx2", "192.168.100.12", 5, down=True)), "192.168.100.12")
    assert (a.gid_index, b.gid_index) == (3, 5)
    assert a.hcas == ("rocep1s0f0",)  # the DOWN port never joins
    assert a.netdev == "enp1s0f0np0"
    assert a.env() == {
        "NCCL_NET": "IB",
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "rocep1s0f0",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
        "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
    }


def test_second_rail_joins_only_at_the_same_index(tmp_path):
    same = detect(scan_ports(node(tmp_path, "a", "10.0.0.1", 3, "10.0.1.1", 3, down=True)), "10.0.0.1")
    assert same.hcas == ("rocep1s0f0", "roceP2p1s0f0")
    other = detect(scan_ports(node(tmp_path, "b", "10.0.0.1", 3, "10.0.1.1", 4, down=True)), "10.0.0.1")
    assert other.hcas == ("rocep1s0f0",)


def test_active_second_port_with_ipv4_joins(tmp_path):
    f = detect(scan_ports(node(tmp_path, "a", "10.0.0.1", 3)), "10.0.0.1")
    assert f.hcas == ("rocep1s0f0", "rocep1s0f1")


def test_fabric_ip_inferred_when_unambiguous(tmp_path):
    f = detect(scan_ports(node(tmp_path, "a", "10.0.0.7", 3, down=True)), None)
    assert f.fabric_ip == "10.0.0.7" and f.gid_index == 3
    with pytest.raises(FabricError, match="cannot infer the fabric IP"):
        detect(scan_ports(node(tmp_path, "b", "10.0.0.7", 3)), None)  # two IPs on two ACTIVE ports


def test_wrong_ip_and_missing_devices(tmp_path):
    with pytest.raises(FabricError, match="no ACTIVE RoCE v2 GID carries the fabric IP 10.0.0.99"):
        detect(scan_ports(node(tmp_path, "a", "10.0.0.1", 3)), "10.0.0.99")
    with pytest.raises(FabricError, match="no RDMA devices"):
        detect(scan_ports(tmp_path / "empty"), "10.0.0.1")


def test_ip_only_on_down_port_is_not_used(tmp_path):
    with pytest.raises(FabricError, match="no ACTIVE"):
        detect(scan_ports(node(tmp_path, "a", "10.0.0.1", 3, down=True)), "10.9.9.9")
