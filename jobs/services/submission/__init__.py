"""Submitting a workload: storing it QUEUED (intake), the facts it is judged against, and the caps on queued work."""
