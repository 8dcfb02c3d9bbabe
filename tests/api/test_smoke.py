from __future__ import annotations


def test_submit_then_list(world, submit):
    created = submit()
    assert created["state"] == "QUEUED"
    assert created["queue_position"] == 1
    listing = world.client("teammate").get("/api/v1/workloads/")
    assert listing.status_code == 200, listing.content
    assert [w["uid"] for w in listing.json()["results"]] == [created["uid"]]
