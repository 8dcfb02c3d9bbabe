"""Run a command (the test suite) with real PostgreSQL and Redis behind it.

DATABASE_URL and REDIS_URL are used when given; otherwise throwaway servers are started for the run and
removed afterwards. Usage: python -m devtools.testenv -- pytest [args...]
"""

from __future__ import annotations

import os
import subprocess
import sys

from devtools.services import PostgresServer, RedisServer, ServiceError
from portal.sealing import generate_keypair


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m devtools.testenv -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    started: list[PostgresServer | RedisServer] = []
    env = dict(os.environ)
    try:
        if not env.get("DATABASE_URL"):
            server = PostgresServer()
            env["DATABASE_URL"] = server.start()
            started.append(server)
            print(f"[testenv] throwaway PostgreSQL on port {server.port}", file=sys.stderr)
        if not env.get("REDIS_URL"):
            redis = RedisServer()
            env["REDIS_URL"] = redis.start()
            started.append(redis)
            print(f"[testenv] throwaway Redis on port {redis.port}", file=sys.stderr)
        env.setdefault("DEBUG", "0")
        env.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,testserver")
        env.setdefault("SECRET_KEY", "test-suite-secret-key-not-for-production")
        if not env.get("PORTAL_SEAL_PUBLIC_KEY") and not env.get("PORTAL_SEAL_PRIVATE_KEY"):
            # A fresh pair for the run: the test process seals as the web does, the engine's worker opens.
            env["PORTAL_SEAL_PUBLIC_KEY"], env["PORTAL_SEAL_PRIVATE_KEY"] = generate_keypair()
        return subprocess.call(argv, env=env)
    except ServiceError as exc:
        print(f"[testenv] ERROR: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        for server in reversed(started):
            server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
