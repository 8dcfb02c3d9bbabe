"""Caps that keep one person or one team from flooding the portal: queued workloads per user and per team.

The quota decides what runs; these decide how much may wait. Counted at submit, so two submissions racing
at the very edge may both pass (the cap is a guard against floods, not an accounting rule).
"""

from __future__ import annotations

from django.conf import settings

from jobs.models import Team
from jobs.services.validation import SubmissionInvalid

QUEUE_FIELD = "queue"


def queue_limits_judge(*, team: Team, mine: int, theirs: int) -> None:
    """Raise SubmissionInvalid (field `queue`) when the owner or the team already has the most queued:
    `mine` is how many the owner has waiting (in every team), `theirs` how many the team has."""
    if mine >= settings.PORTAL_MAX_QUEUED_PER_USER:
        raise SubmissionInvalid(
            {
                QUEUE_FIELD: [
                    f"You already have {mine} workloads waiting (at most {settings.PORTAL_MAX_QUEUED_PER_USER}); "
                    "cancel some or wait until they start."
                ]
            }
        )
    if theirs >= settings.PORTAL_MAX_QUEUED_PER_TEAM:
        raise SubmissionInvalid(
            {
                QUEUE_FIELD: [
                    f"{team.name} already has {theirs} workloads waiting (at most "
                    f"{settings.PORTAL_MAX_QUEUED_PER_TEAM}); wait until some start."
                ]
            }
        )
