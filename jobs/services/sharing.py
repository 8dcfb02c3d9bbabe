"""Sharing settings taking effect: after an admin or manager changes a cohort, a borrowing or lending
limit or a per-user cap, the namespaces' ResourceQuotas follow and admission runs again."""

from __future__ import annotations

import logging

from django.db import transaction

from jobs.models import Quota, Team

log = logging.getLogger(__name__)


def sharing_changed(team_ids: list[int]) -> int:
    """Re-run admission for the teams' quota types now and, once committed, re-sync their namespaces'
    ResourceQuota (which allows quota + borrowing limit). Returns how many workloads were admitted."""
    from jobs.services.admission import quota_admit

    admitted = 0
    for team_id, gpu_type_id in Quota.objects.filter(team_id__in=team_ids).values_list("team_id", "gpu_type_id"):
        admitted += len(quota_admit(team_id=team_id, gpu_type_id=gpu_type_id))
    transaction.on_commit(lambda: namespaces_sync(team_ids))
    return admitted


def namespaces_sync(team_ids: list[int]) -> None:
    """Ask the provisioner to bring these teams' namespaces (their ResourceQuota) up to date."""
    from jobs.services.object_creation import namespace_ensure

    for team in Team.objects.filter(id__in=team_ids):
        try:
            namespace_ensure(team, force=True)
        except Exception as exc:  # Kubernetes unreachable: the next submission syncs it again
            log.warning("ResourceQuota of %s not updated now: %s", team.namespace, exc)


def team_sharing_update(
    *,
    team: Team,
    by,
    fair_share: bool,
    half_life_hours: int,
    user_max_queued: int | None,
    user_max_gpus: dict[int, int | None],
) -> None:
    """A manager's rules inside the team; admission runs again at once (a raised cap may admit work)."""
    with transaction.atomic():
        Team.objects.filter(id=team.id).update(
            fair_share=fair_share, fair_share_half_life_hours=half_life_hours, user_max_queued=user_max_queued
        )
        for gpu_type_id, cap in user_max_gpus.items():
            Quota.objects.filter(team=team, gpu_type_id=gpu_type_id).update(user_max_gpus=cap)
        log.info("team %s sharing rules changed by %s", team.slug, by.get_username())
        sharing_changed([team.id])
