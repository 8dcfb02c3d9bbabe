"""Developer tooling: the `make run` supervisor and throwaway PostgreSQL/Redis servers for tests."""
