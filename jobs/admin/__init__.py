"""Django admin for the domain. Thin: every change goes through an engine service."""

from __future__ import annotations

from jobs.admin import catalog, teams, workloads, workspaces

__all__ = ["catalog", "teams", "workloads", "workspaces"]
