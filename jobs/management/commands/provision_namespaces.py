"""Create or update every team's namespace (or the named teams'), with this process's credentials.

For clusters that forbid the portal `create rolebindings`: an admin runs this with an admin's kubeconfig
(and the chart's KUBE_* environment) whenever a team is added or its quota changes, and the chart runs
with provisioner.enabled=false, so no portal identity can create or bind anything at all.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.models import Team
from jobs.services.provisioning import NamespaceRefused, namespace_provision


class Command(BaseCommand):
    help = "Create or update team namespaces (quota, limits, NetworkPolicy, RoleBindings) as an admin."

    def add_arguments(self, parser):
        parser.add_argument("teams", nargs="*", help="team slugs (default: every team)")

    def handle(self, *args, teams: list[str], **options):
        chosen = Team.objects.order_by("slug")
        if teams:
            chosen = chosen.filter(slug__in=teams)
            unknown = sorted(set(teams) - set(chosen.values_list("slug", flat=True)))
            if unknown:
                raise CommandError(f"no such team: {', '.join(unknown)}")
        try:
            for team in chosen:
                self.stdout.write(f"{namespace_provision(team)}: provisioned")
        except NamespaceRefused as exc:
            raise CommandError(str(exc)) from exc
        except (ApiException, kube.KubeConfigError) as exc:
            message = kube.classify(exc).message if isinstance(exc, ApiException) else str(exc)
            raise CommandError(f"Kubernetes refused: {message}") from exc
