"""A workload's container logs and events, and the slots that bound followed log streams."""
