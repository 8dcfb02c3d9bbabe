"""Issue, list or revoke agent tokens: `manage.py agent_token issue NAME --node NODE` prints it once.

For agents outside the cluster (and the local cluster's simulator): agents in the chart's DaemonSet need
no issued token, they send their pod's own service-account token (agent/README.md)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from telemetry.models import AgentToken
from telemetry.services.tokens import agent_token_issue, agent_token_revoke


class Command(BaseCommand):
    help = "Issue (printed once), list or revoke the bearer tokens node agents push reports with."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        issue = sub.add_parser("issue", help="issue a token and print it (only the token, on stdout)")
        issue.add_argument("name", help="what the token is for, e.g. 'GPU nodes of cluster A'")
        issue.add_argument("--node", required=True, help="the one node whose reports it may send")
        sub.add_parser("list", help="list tokens (never the tokens themselves)")
        revoke = sub.add_parser("revoke", help="revoke a token by its id or prefix")
        revoke.add_argument("token", help="the id or the prefix shown by `list`")

    def handle(self, *args, **options):
        action = options["action"]
        if action == "issue":
            _row, token = agent_token_issue(name=options["name"], node=options["node"])
            self.stderr.write("Copy this token now; it is not stored and will not be shown again.")
            self.stdout.write(token)
        elif action == "list":
            for row in AgentToken.objects.all():
                state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
                used = f"{row.last_used_at:%Y-%m-%d %H:%M}" if row.last_used_at else "never"
                self.stdout.write(
                    f"{row.id}\t{row.prefix}…\t{state}\tlast used {used}\t{row.node_name or '(unbound)'}\t{row.name}"
                )
        else:
            key = options["token"]
            rows = AgentToken.objects.filter(id=int(key)) if key.isdigit() else AgentToken.objects.filter(prefix=key)
            row = rows.first()
            if row is None:
                raise CommandError(f"no agent token with id or prefix {key!r}")
            agent_token_revoke(token=row)
            self.stdout.write(f"revoked {row}")
