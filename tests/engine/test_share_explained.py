"""Why my share (pure): a member's decayed usage against the team's, names only for managers, and where
their next workload goes in fair-share order; why a preempted workload was the one chosen."""

from __future__ import annotations

from jobs.services.queue.share_explained import explain_share, why_chosen

NAMES = {1: "ann", 2: "bob", 3: "cy", 4: "dee"}
USAGE = {1: 12.0, 2: 3.0, 3: 30.0}  # dee used nothing


def test_a_member_sees_their_own_row_by_name_and_the_others_unnamed():
    share = explain_share(USAGE, me=1, names=NAMES, show_names=False, fair_share=True, half_life=24.0)
    assert [(r.name, r.gpu_hours, r.mine) for r in share.rows] == [
        ("", 30.0, False),
        ("ann", 12.0, True),
        ("", 3.0, False),
        ("", 0.0, False),
    ]
    assert (share.mine, share.behind, share.ahead_of, share.place) == (12.0, 2, 1, 3)


def test_a_manager_sees_every_name():
    share = explain_share(USAGE, me=4, names=NAMES, show_names=True, fair_share=True, half_life=24.0)
    assert [r.name for r in share.rows] == ["cy", "ann", "bob", "dee"]
    assert share.place == 1  # used least: first in line
    assert share.largest == 30.0


def test_why_a_workload_was_chosen_to_be_preempted_names_the_rule_and_its_own_facts():
    text = why_chosen(priority=0, admitted_at=None)
    assert "lowest priority first" in text
    assert "priority 0" in text
