"""What workloads mount or read: workspaces (claims in the team namespace) and stored secrets."""
