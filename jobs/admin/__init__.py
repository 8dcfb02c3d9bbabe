"""Django admin for the domain. Thin: every change goes through an engine service."""

from __future__ import annotations

from jobs.admin import catalog, health, people, queueing, sharing, teams, workloads, workspaces

__all__ = ["catalog", "health", "people", "queueing", "sharing", "teams", "workloads", "workspaces"]
