"""The checkpoint contract: what a batch job is told (its checkpoint directory, attempt and grace), the
token that lets it report a checkpoint and nothing else, the reports themselves, and what a stop would lose."""
