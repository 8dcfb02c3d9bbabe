#!/usr/bin/env python3
"""`gpuportal checkpoint` for inside a batch job's container, with nothing but Python's standard library.

The full client (cli/main.py) needs `requests` and `websockets`, which a job's image may lack; this one file
needs only python3, so an image can carry it as /usr/local/bin/gpuportal (the local python image does,
localcluster/images.py) or a job can run it from its workspace. It knows one command, with the full client's
flags and answers:

    gpuportal checkpoint [--step N] [--path P] [--note TEXT] [--json]

It reads what the portal put into every batch job: GPUPORTAL_API_URL (the portal as pods reach it),
GPUPORTAL_TOKEN_FILE (the workload's own token), GPUPORTAL_WORKLOAD and GPUPORTAL_ATTEMPT, and POSTs
/api/v1/workloads/<uid>/checkpoints/. Exit codes as the full client's: 0 done, 1 refused, 2 usage, 3 no answer.
This file imports nothing from the project (it is copied alone into images).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
USER_AGENT = "gpuportal-incontainer/1"
RETRIES = 3


class Usage(Exception):
    """Not inside a batch job, or the environment is incomplete."""


def checkpoint_request(
    env: Mapping[str, str], *, step: int | None, path: str, note: str
) -> tuple[str, dict, dict[str, str]]:
    """(url, JSON body, headers) of the report, from the job's environment; Usage names what is missing."""
    url = (env.get("GPUPORTAL_API_URL") or env.get("GPUPORTAL_URL") or "").rstrip("/")
    token_file = env.get("GPUPORTAL_TOKEN_FILE", "")
    uid = env.get("GPUPORTAL_WORKLOAD", "")
    missing = [
        name
        for name, value in (
            ("GPUPORTAL_API_URL", url),
            ("GPUPORTAL_TOKEN_FILE", token_file),
            ("GPUPORTAL_WORKLOAD", uid),
        )
        if not value
    ]
    if missing:
        raise Usage(
            f"not inside a GPU Portal batch job: {', '.join(missing)} not set (the portal sets them in every "
            "batch job it runs when it knows how its pods reach it)"
        )
    if not url.startswith(("http://", "https://")):
        raise Usage(f"GPUPORTAL_API_URL must start with http:// or https:// (got {url!r})")
    try:
        token = Path(token_file).read_text().strip()
    except OSError as exc:
        raise Usage(f"cannot read the workload token {token_file}: {exc.strerror}") from exc
    body: dict = {"path": path, "note": note}
    if step is not None:
        body["step"] = step
    attempt = env.get("GPUPORTAL_ATTEMPT", "")
    if attempt.isdigit():
        body["attempt"] = int(attempt)
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    return f"{url}/api/v1/workloads/{quote(uid, safe='')}/checkpoints/", body, headers


def refusal(status: int, payload: bytes) -> str:
    """The portal's error body in one line: its detail, then each field's messages."""
    try:
        data = json.loads(payload or b"{}")
    except ValueError:
        return f"HTTP {status}"
    error = data.get("error") if isinstance(data, dict) else None  # {"error": {"message": ..., "fields": ...}}
    if not isinstance(error, dict):
        return f"HTTP {status}"
    words = [str(error.get("message") or f"HTTP {status}")]
    for field, messages in (error.get("fields") or {}).items():
        if isinstance(messages, list):
            words += [f"{field}: {m}" for m in messages]
    return f"{'; '.join(words)} (HTTP {status})"


def _post(url: str, body: dict, headers: dict[str, str], timeout: float) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")  # noqa: S310 - the portal's own http(s) URL, checked above
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return json.loads(response.read() or b"{}")


def report(env: Mapping[str, str], *, step: int | None, path: str = "", note: str = "", timeout: float = 10.0) -> dict:
    """Send the report (retried on no answer and on 429/502/503/504: a second report of the same checkpoint
    only refreshes "last checkpoint"); returns what the portal stored."""
    url, body, headers = checkpoint_request(env, step=step, path=path, note=note)
    for attempt in range(RETRIES + 1):
        try:
            return _post(url, body, headers, timeout)
        except urllib.error.HTTPError as exc:
            if exc.code not in (429, 502, 503, 504) or attempt == RETRIES:
                raise
        except (urllib.error.URLError, OSError):
            if attempt == RETRIES:
                raise
        time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuportal", description="GPU Portal inside a batch job's container")
    commands = parser.add_subparsers(dest="command", required=True)
    checkpoint = commands.add_parser("checkpoint", help="tell the portal this job saved a checkpoint")
    checkpoint.add_argument("--step", type=int, help="your progress counter (an epoch, a step)")
    checkpoint.add_argument("--path", default="", help="where you wrote it, e.g. $GPUPORTAL_CHECKPOINT_DIR/step-42.pt")
    checkpoint.add_argument("--note", default="", help="a few words shown with it")
    checkpoint.add_argument("--json", action="store_true", help="print what the portal stored, as JSON")
    args = parser.parse_args(argv)
    env = os.environ if env is None else env
    uid = env.get("GPUPORTAL_WORKLOAD", "")
    try:
        stored = report(env, step=args.step, path=args.path, note=args.note)
    except Usage as exc:
        print(f"gpuportal: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except urllib.error.HTTPError as exc:
        print(f"gpuportal: {refusal(exc.code, exc.read())}", file=sys.stderr)
        return EXIT_FAILED
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"gpuportal: the portal did not answer at {env.get('GPUPORTAL_API_URL')}: {reason}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.json:
        print(json.dumps(stored, indent=2))
    else:
        step = f" step {stored['step']}" if stored.get("step") is not None else ""
        print(f"checkpoint{step} recorded for {uid} (attempt {stored.get('attempt')})")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
