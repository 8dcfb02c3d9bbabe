"""What our device plugin offers per GPU on a node configured for sharing (issue 40), as NVIDIA's does."""

from __future__ import annotations

import pytest

from localcluster.deviceplugin import sharing


def test_whole_gpus_are_offered_as_before():
    offer = sharing.offer("n1", 2)
    assert offer.resource == "nvidia.com/gpu"
    assert offer.endpoint == "gpuportal.sock"
    assert [d.id for d in offer.devices] == sharing.gpu_ids("n1", 2)
    assert offer.visible_devices([offer.devices[1].id]) == sharing.gpu_ids("n1", 2)[1]


def test_mig_slices_have_their_own_uuids_and_reach_the_container_as_mig_devices():
    offer = sharing.offer("n1", 2, "mig:1g.10gb:7")
    assert offer.resource == "nvidia.com/mig-1g.10gb"
    assert len(offer.devices) == 14
    assert len({d.id for d in offer.devices}) == 14
    gpus = sharing.gpu_ids("n1", 2)
    assert [d.gpu for d in offer.devices] == [gpus[0]] * 7 + [gpus[1]] * 7
    first = offer.devices[0]
    assert first.id.startswith("MIG-")
    assert offer.visible_devices([first.id]) == first.id
    # Stable: the same node gives the same slices after a restart.
    assert sharing.offer("n1", 2, "mig:1g.10gb:7") == offer


def test_time_sliced_replicas_name_their_gpu_once():
    offer = sharing.offer("n1", 1, "time-sliced:4")
    assert offer.resource == "nvidia.com/gpu.shared"
    (gpu,) = sharing.gpu_ids("n1", 1)
    assert [d.id for d in offer.devices] == [f"{gpu}::{n}" for n in range(4)]
    assert offer.visible_devices([d.id for d in offer.devices[:2]]) == gpu


@pytest.mark.parametrize("spec", ["mig", "mig:1g:7", "mig:1g.10gb:9", "time-sliced:1", "time-sliced:x", "halves"])
def test_a_spec_it_cannot_offer_is_named(spec):
    with pytest.raises(sharing.SharingError, match="expected"):
        sharing.offer("n1", 1, spec)


def test_simulated_pools_offer_mig_slices_and_time_sliced_shares_for_scale():
    from localcluster.kubelet import node_status
    from localcluster.pools import PoolsError, parse_pools

    config = parse_pools(
        {
            "pools": [
                {"name": "a100-mig", "nodes": 4, "gpus_per_node": 8, "sharing": "mig:1g.10gb:7"},
                {"name": "t4-shared", "nodes": 2, "gpus_per_node": 4, "sharing": "time-sliced:4"},
                {"name": "p100", "nodes": 1, "gpus_per_node": 4},
            ]
        }
    )
    mig, shared, whole = config.pools
    assert node_status(mig, 10250, 0.0)["allocatable"]["nvidia.com/mig-1g.10gb"] == "56"
    assert "nvidia.com/gpu" not in node_status(mig, 10250, 0.0)["capacity"]
    assert node_status(shared, 10250, 0.0)["capacity"]["nvidia.com/gpu.shared"] == "16"
    assert node_status(whole, 10250, 0.0)["allocatable"]["nvidia.com/gpu"] == "4"
    with pytest.raises(PoolsError, match=r"pools\[0\]\.sharing: 'halves'"):
        parse_pools({"pools": [{"name": "x", "gpus_per_node": 1, "sharing": "halves"}]})
