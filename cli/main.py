"""gpuportal: submit, list, follow and cancel GPU workloads from a terminal, through the REST API.

Exit codes: 0 success; 1 the portal refused the request, or the workload waited for did not succeed;
2 usage or configuration error; 3 the portal could not be reached (or the address is not the portal's);
4 `wait` timed out.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shlex
import shutil
import sys
import time
import webbrowser
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import requests

import spec_rules
from cli import config, ssh
from cli.client import ApiError, PortalClient, Unreachable

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_TIMEOUT = 0, 1, 2, 3, 4
FINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "PREEMPTED"}
NOT_STARTED = {"QUEUED", "SUBMITTING", "PENDING"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuportal",
        description="Run GPU batch jobs and services on the GPU Portal.",
        epilog="Configure with --url/--token, GPUPORTAL_URL/GPUPORTAL_TOKEN, or ~/.config/gpuportal/config.toml "
        "(url = ..., token = ...). Exit codes: 0 ok, 1 refused or workload failed, 2 usage, 3 unreachable, "
        "4 wait timed out.",
    )
    parser.add_argument("--url", help="portal address, e.g. https://gpus.example.org")
    parser.add_argument("--token", help="API token from your profile page")
    _output_options(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    submit = commands.add_parser("submit", help="submit a workload; the command follows `--`")
    image = submit.add_mutually_exclusive_group(required=True)
    image.add_argument("--image", help="image reference, e.g. docker.io/pytorch/pytorch:2.3.0-cuda12.1")
    image.add_argument("--catalog-image", type=int, metavar="ID", help="an image from the catalog, by id")
    submit.add_argument("--gpu-type", required=True, help="GPU type slug, e.g. p100")
    submit.add_argument("--gpus", type=int, default=1, help="number of GPUs (per node with --nodes; default 1)")
    submit.add_argument(
        "--nodes",
        type=int,
        help="a batch job on N nodes, one rank each, started all or nothing (torchrun's MASTER_ADDR, "
        "MASTER_PORT, WORLD_SIZE, NODE_RANK and NPROC_PER_NODE are set)",
    )
    submit.add_argument(
        "--topology",
        choices=["preferred", "required"],
        help="with --nodes: the ranks should (preferred) or must (required) share the site's zone or rack",
    )
    submit.add_argument(
        "--kind", choices=["batch", "service"], default="batch", help="batch runs to its end; a service until cancelled"
    )
    submit.add_argument("--name", help="workload name (lowercase, digits, '-')")
    submit.add_argument("--team", help="team slug (needed if you are in several teams)")
    submit.add_argument("--port", type=int, help="port a service listens on")
    submit.add_argument(
        "--time-limit", type=int, metavar="SECONDS", help="stopped after this long (default: the portal's)"
    )
    submit.add_argument("--priority", type=int, help="queue priority (team managers only)")
    submit.add_argument(
        "--restartable",
        action="store_true",
        default=None,
        help="if preempted by a lender reclaiming its GPUs, requeue it at the front instead of failing (batch)",
    )
    submit.add_argument(
        "--retry-limit", type=int, metavar="N",
        help="automatic retries of a restartable job after ends that are not its fault (default: the team's)",
    )  # fmt: skip
    submit.add_argument(
        "--retry-exit-code", type=int, action="append", default=[], metavar="CODE", dest="retry_exit_codes",
        help="an exit code of your own that means 'run me again' (repeatable)",
    )  # fmt: skip
    submit.add_argument(
        "--checkpoint-workspace", choices=["home", "team"],
        help="where $GPUPORTAL_CHECKPOINT_DIR lies (default: your home)",
    )  # fmt: skip
    submit.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="repeatable")
    submit.add_argument(
        "--dataset", action="append", default=[], metavar="NAME", help="mount /datasets/NAME read-only (repeatable)"
    )
    submit.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME[=VAR]",
        help="a stored secret as /var/run/secrets/gpuportal/NAME, and $VAR if given (repeatable)",
    )
    submit.add_argument("--args", action="store_true", help="what follows `--` are arguments, not the command")
    submit.add_argument("--shared", action="store_true", help="a service: teammates may open it too")
    submit.add_argument(
        "--array",
        type=int,
        metavar="N",
        help="submit N copies in one request (a sweep), each with $GPUPORTAL_ARRAY_INDEX set to 0..N-1 and "
        "$GPUPORTAL_ARRAY_SIZE to N; with --name, they are named NAME-0 .. NAME-(N-1)",
    )
    submit.add_argument("--wait", action="store_true", help="wait until it finishes; exit 0 only if it succeeded")
    submit.add_argument("command_line", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")

    listing = commands.add_parser("list", help="list workloads in your teams, newest first")
    listing.add_argument(
        "--state", action="append", default=[], help="QUEUED, RUNNING, ... in any case (repeatable, or comma-separated)"
    )
    listing.add_argument("--team")
    listing.add_argument("--gpu-type")
    listing.add_argument("--owner", help="username")
    listing.add_argument("--kind", choices=["batch", "service"])
    listing.add_argument("--limit", type=_at_least_one, default=50, help="at most this many (default 50)")

    logs = commands.add_parser("logs", help="print a workload's container logs")
    logs.add_argument("uid", type=_workload_uid)
    logs.add_argument("--tail", type=int, help="lines from the end")
    logs.add_argument("--since", type=int, metavar="SECONDS", help="only the last N seconds")
    logs.add_argument("-f", "--follow", action="store_true", help="wait for the container, then stream")
    logs.add_argument("--rank", type=int, help="a gang job's rank (default 0)")

    cancel = commands.add_parser(
        "cancel",
        help="cancel workloads",
        description="Cancel one workload or several (as xargs hands them over). Each that cannot be cancelled "
        "is said on stderr and the others still are; exit 1 if any could not be. With -o json: the workload "
        "as cancelled, or for several uids a list of those cancelled.",
    )
    cancel.add_argument("uids", nargs="+", type=_workload_uid, metavar="uid", help=COMMON_HELP["uid"])

    wait = commands.add_parser(
        "wait",
        help="wait until a workload finishes; exit 0 only if it succeeded",
        description="Wait until a workload finishes: exit 0 if it succeeded, 1 if it ended otherwise, 4 if "
        '--timeout ran out (with -o json: the workload as last seen, with "timed_out": true).',
    )
    wait.add_argument("uid", type=_workload_uid)
    wait.add_argument("--timeout", type=_seconds(0), default=0, metavar="SECONDS", help="0: wait forever")
    wait.add_argument(
        "--interval", type=_seconds(0.1), default=2.0, metavar="SECONDS", help="between looks (default 2, at least 0.1)"
    )
    clone = commands.add_parser("clone", help="submit a copy of a workload (same image, GPUs, command, env)")
    clone.add_argument("uid", type=_workload_uid)
    clone.add_argument("--name", help="the copy's name (default: made by the portal from the image)")
    clone.add_argument("--gpus", type=int, help="a different number of GPUs")
    clone.add_argument("--wait", action="store_true", help="wait until it finishes; exit 0 only if it succeeded")

    usage = commands.add_parser("usage", help="GPU-hours of your team (default: this month, by day)")
    usage.add_argument("--team")
    usage.add_argument("--start", metavar="YYYY-MM-DD", help="first day, inclusive (default: the 1st of this month)")
    usage.add_argument("--end", metavar="YYYY-MM-DD", help="last day, inclusive (default: today)")
    usage.add_argument("--by", choices=["day", "user", "gpu_type"], default="day", help="one row per (default: day)")
    usage.add_argument("--user", help="only this user's (managers: anyone in the team)")

    queue = commands.add_parser("queue", help="your team's quotas and what waits, in order")
    queue.add_argument("--team")

    gpu_types = commands.add_parser("gpu-types", help="GPU types: free in the cluster, and your team's quota")
    gpu_types.add_argument("--team")

    datasets = commands.add_parser("datasets", help="the datasets your team may mount (submit --dataset NAME)")
    datasets.add_argument("--team")

    secrets = commands.add_parser("secrets", help="your stored secrets and your team's shared ones (names only)")
    secrets.add_argument("--team")
    secret_set = commands.add_parser(
        "secret-set",
        help="store or replace a secret; the value is read from standard input (or asked for, not echoed)",
    )
    secret_set.add_argument("name", help="lowercase letters, digits and '-'; how --secret refers to it")
    secret_set.add_argument("--team")
    secret_set.add_argument("--shared", action="store_true", help="usable by the whole team (managers only)")
    secret_delete = commands.add_parser("secret-delete", help="delete a stored secret")
    secret_delete.add_argument("name", help="as `gpuportal secrets` lists it")
    secret_delete.add_argument("--team")

    members = commands.add_parser("members", help="who is in your team, with their roles")
    members.add_argument("--team")
    members_add = commands.add_parser("members-add", help="add someone to your team by username (managers)")
    members_add.add_argument("username", help="they must have signed in to the portal once")
    members_add.add_argument("--role", choices=["member", "manager"], default="member", help="default: member")
    members_add.add_argument("--team")
    members_role = commands.add_parser("members-role", help="make a member a manager or back (managers)")
    members_role.add_argument("username", help="a member of the team")
    members_role.add_argument("role", choices=["member", "manager"], help="their new role")
    members_role.add_argument("--team")
    members_remove = commands.add_parser("members-remove", help="take someone out of your team (managers)")
    members_remove.add_argument("username", help="a member of the team")
    members_remove.add_argument("--team")

    checkpoint = commands.add_parser(
        "checkpoint",
        help="inside a batch job: tell the portal it saved a checkpoint (uses the job's own token and "
        "$GPUPORTAL_API_URL)",
    )
    checkpoint.add_argument("--step", type=int, help="your progress counter (an epoch, a step)")
    checkpoint.add_argument("--path", default="", help="where you wrote it, e.g. $GPUPORTAL_CHECKPOINT_DIR/step-42.pt")
    checkpoint.add_argument("--note", default="", help="a few words shown with it")
    checkpoints = commands.add_parser("checkpoints", help="a batch job's last checkpoints and the newest one's age")
    checkpoints.add_argument("uid", type=_workload_uid)
    opening = commands.add_parser("open", help="print the address a service opens at (in a signed-in browser)")
    opening.add_argument("uid", type=_workload_uid)
    opening.add_argument("--browser", action="store_true", help="open it in your web browser too")
    shell = commands.add_parser("ssh", help="open an SSH session into a running service (your key on your profile)")
    shell.add_argument("uid")
    shell.add_argument("-L", dest="forwards", action="append", default=[], metavar="PORT:HOST:PORT",
                       help="forward a local port into the service, as ssh -L")  # fmt: skip
    shell.add_argument("remote", nargs=argparse.REMAINDER, help="a command to run instead of a shell")
    tunnel = commands.add_parser(
        "ssh-proxy", help="ssh's ProxyCommand: ssh -o ProxyCommand='gpuportal ssh-proxy %%h' UID"
    )
    tunnel.add_argument("host", help="the service's uid (ssh's %%h), or gpuportal-<uid>")
    tunnel.add_argument("--origin", default="", metavar="URL",
                        help="where the portal serves services, when not on its own host (ssh-config writes it)")  # fmt: skip
    ssh_config = commands.add_parser("ssh-config", help="print ssh_config Host blocks for ssh and VS Code Remote-SSH")
    ssh_config.add_argument(
        "uid", nargs="?", help="one service (default: your running services whose image runs an SSH server)"
    )
    for name, command_parser in commands.choices.items():
        command_parser.set_defaults(command_parser=command_parser)
        for action in command_parser._actions:
            action.help = action.help or COMMON_HELP.get(action.dest)
        if name not in TEXT_ONLY:
            _output_options(command_parser, after_command=True)
    return parser


# What an argument several commands share means, where the command says nothing of its own.
COMMON_HELP = {
    "uid": "the workload's id, as the UID column of `gpuportal list` shows it",
    "team": "team slug (needed if you are in several teams)",
    "gpu_type": "GPU type slug, e.g. p100 (`gpuportal gpu-types` lists them)",
    "kind": "batch or service",
}

# Commands whose output is not the portal's data (an SSH session, ssh_config text): no JSON to choose, and
# ssh's own -o options pass through to it.
TEXT_ONLY = {"ssh", "ssh-proxy", "ssh-config"}


def _output_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """--json / -o json, before the command or after it (`gpuportal list -o json`, as scripts often write it).
    After the command they default to SUPPRESS, so that they leave what was given before it alone."""
    unset = argparse.SUPPRESS if after_command else None
    parser.add_argument(
        "--json", action="store_true", default=unset or False, help="print JSON instead of text (same as --output json)"
    )
    parser.add_argument(
        "-o", "--output", choices=["text", "json"], default=unset or "text", help="text (default) or json"
    )


# `gpuportal secrets delete NAME`, as git, gh and kubectl word it: the command that does it here.
VERB_COMMANDS = {
    ("secrets", "delete"): "secret-delete", ("secrets", "rm"): "secret-delete", ("secrets", "remove"): "secret-delete",
    ("secrets", "set"): "secret-set", ("secrets", "add"): "secret-set", ("secrets", "create"): "secret-set",
    ("members", "add"): "members-add", ("members", "role"): "members-role", ("members", "remove"): "members-remove",
    ("members", "rm"): "members-remove", ("members", "delete"): "members-remove",
}  # fmt: skip


def _hint(args: argparse.Namespace, unknown: list[str]) -> str:
    command = VERB_COMMANDS.get((args.command, unknown[0]))
    if command is None:
        return ""
    words = [command, *unknown[1:]] + (["--team", args.team] if getattr(args, "team", None) else [])
    return f" (did you mean `gpuportal {shlex.join(words)}`?)"


def _workload_uid(raw: str) -> str:
    """A workload's id as `gpuportal list` shows it (16 hex characters); anything else is a usage error here,
    not a path sent to the portal (`../x` reached other addresses and came back as an HTML 404)."""
    uid = raw.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{1,16}", uid):
        raise argparse.ArgumentTypeError(f"not a workload's id: {raw!r} (its UID column in `gpuportal list`)")
    return uid


MAX_WAIT_SECONDS = 366 * 86400  # a year: past any workload's time limit


def _seconds(least: float):
    """An argparse type: a finite number of seconds from `least` to a year (`inf` overflowed time.sleep)."""

    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a number of seconds, got {raw!r}") from None
        if not least <= value <= MAX_WAIT_SECONDS:  # also refuses nan
            raise argparse.ArgumentTypeError(f"from {least:g} to {MAX_WAIT_SECONDS} seconds, got {raw!r}")
        return value

    return parse


def _at_least_one(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the subcommand's usage, which lists what it does take
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(unknown)}{_hint(args, unknown)}"
        )
    if args.command == "submit" and spec_rules.topology_problem(args.topology, args.nodes):  # the portal refuses it too
        args.command_parser.error(
            "argument --topology: only a job on several nodes can keep them together; "
            "add --nodes N (2 or more) or drop --topology"
        )
    args.json = args.json or args.output == "json"
    if args.json and (args.command in TEXT_ONLY or (args.command == "logs" and args.follow)):
        # What these print is not the portal's data (an SSH session, ssh_config text, a stream of log lines):
        # printing it anyway gave a script's JSON reader text it refuses.
        what = "a stream of log lines; without --follow, logs -o json prints them as one document" if (
            args.command == "logs") else "text only"  # fmt: skip
        args.command_parser.error(f"-o json: {args.command} prints {what}")
    try:
        if args.command == "checkpoint":
            settings = config.load_in_workload()
        else:
            settings = config.load(url=args.url, token=args.token)
    except config.ConfigError as exc:
        print(f"gpuportal: {exc}", file=sys.stderr)
        return EXIT_USAGE
    client = PortalClient(settings.url, settings.token)
    try:
        code = COMMANDS[args.command](client, args)
        sys.stdout.flush()  # here, where a reader that has gone is a quiet 141, not a failed flush at exit (120)
        return code
    except ApiError as exc:
        print(f"gpuportal: {exc.message} (HTTP {exc.status})", file=sys.stderr)
        for field, messages in exc.fields.items():
            for message in messages:
                print(f"  {field}: {message}", file=sys.stderr)
        return EXIT_FAILED
    except Unreachable as exc:
        print(f"gpuportal: {exc} (is the portal up, and its address right? --url, GPUPORTAL_URL or {config.config_path()})",
              file=sys.stderr)  # fmt: skip
        return EXIT_UNREACHABLE
    except requests.JSONDecodeError:
        # Something answers there, but not as the portal's API does (a web page for every path): most often
        # the address of another server, or of the portal's host without its path.
        print(
            f"gpuportal: {client.base} is not the GPU Portal's API (it answered with something that is not JSON); "
            f"check the portal's address (--url, GPUPORTAL_URL or {config.config_path()})",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gpuportal list | head`): stop quietly, as other command-line tools do, and
        # keep Python from complaining again when it flushes stdout on the way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by the signal


# --- commands ---------------------------------------------------------------------------------------
def cmd_submit(client: PortalClient, args: argparse.Namespace) -> int:
    spec: dict[str, Any] = {"gpu_type": args.gpu_type, "gpu_count": args.gpus, "kind": args.kind}
    optional = {
        "image": args.image,
        "catalog_image": args.catalog_image,
        "name": args.name,
        "team": args.team,
        "port": args.port,
        "time_limit_seconds": args.time_limit,
        "priority": args.priority,
        "restartable": args.restartable,
        "retry_limit": args.retry_limit,
        "retryable_exit_codes": args.retry_exit_codes or None,
        "checkpoint_workspace": args.checkpoint_workspace,
        "nodes": args.nodes,
        "topology": args.topology,
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    if args.shared:
        spec["shared_with_team"] = True
    words = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if words:
        spec["args" if args.args else "command"] = words
    if args.env:
        env = []
        for item in args.env:
            name, sep, value = item.partition("=")
            if not sep or not name:
                print(f"gpuportal: --env wants NAME=VALUE, got {item!r}", file=sys.stderr)
                return EXIT_USAGE
            env.append({"name": name, "value": value})
        spec["env"] = env
    if args.dataset:
        spec["datasets"] = list(args.dataset)
    if args.secret:
        spec["secrets"] = [{"name": name, "env": var} for name, _, var in (item.partition("=") for item in args.secret)]
    refusal = _portal_would_refuse(spec, copies=args.array)
    if refusal:
        return refusal
    if args.array is not None:
        return _submit_array(client, args, spec)
    return _submitted(client, args, client.submit(spec))


def _submitted(client: PortalClient, args: argparse.Namespace, workload: dict) -> int:
    """Show what was submitted, or with --wait follow it to its end. With --output json stdout is one JSON
    document either way: the workload as submitted, or as it ended (not both, one after the other)."""
    if not (args.wait and args.json):
        _show(args, workload, f"{workload['uid']}  {_state(workload)}")
    if args.wait:
        return _wait(client, workload["uid"], timeout=0, interval=2.0, quiet=args.json)
    return EXIT_OK


def _submit_array(client: PortalClient, args: argparse.Namespace, spec: dict[str, Any]) -> int:
    """--array N: N copies in one request, told apart by $GPUPORTAL_ARRAY_INDEX (all stored, or none)."""
    team = spec.pop("team", None)
    base = spec.get("name") or None
    items = [spec_rules.sweep_member(spec, index, args.array, base=base) for index in range(args.array)]
    workloads = client.submit_many(items, team=team)
    if args.json and not args.wait:
        print(json.dumps(workloads, indent=2))
    elif not args.json:
        for workload in workloads:
            print(f"{workload['uid']}  {_state(workload)}")
    if not args.wait:
        return EXIT_OK
    # Every one waited for in turn; exit 0 only if all succeeded. With --output json, one list of them as they
    # ended (a document per copy, one after the other, is no JSON a script can read).
    ends = [_wait_for(client, w["uid"], timeout=0, interval=2.0, quiet=args.json) for w in workloads]
    if args.json:
        print(json.dumps([workload for _, workload in ends], indent=2))
    return next((code for code, _ in ends if code != EXIT_OK), EXIT_OK)


def _portal_would_refuse(spec: dict[str, Any], *, copies: int | None) -> int | None:
    """The portal's own rules (spec_rules) checked before anything is sent, said in the portal's words:
    the exit code when one is broken, else None. The rest the portal judges."""
    problem = spec_rules.sweep_count_problem(copies) if copies is not None else None
    if problem:
        print(f"gpuportal: --array: {problem}", file=sys.stderr)
        return EXIT_USAGE
    variables = [("env", e["name"]) for e in spec.get("env", [])]
    variables += [("secrets", s["env"]) for s in spec.get("secrets", []) if s["env"]]
    problems = [(field, spec_rules.env_name_problem(name)) for field, name in variables]
    if spec.get("name"):  # a sweep's given name leaves room for -0, -1, … (unnamed: the portal names them)
        problems.append(("name", spec_rules.sweep_name_problem(spec["name"], copies or 1)))
    problems = [(field, message) for field, message in problems if message]
    if not problems:
        return None
    print("gpuportal: the portal would refuse this submission", file=sys.stderr)
    for field, message in problems:
        print(f"  {field}: {message}", file=sys.stderr)
    return EXIT_FAILED


def cmd_list(client: PortalClient, args: argparse.Namespace) -> int:
    rows = list(
        client.workloads(
            limit=args.limit,
            state=[s.strip().upper() for given in args.state for s in given.split(",") if s.strip()],
            team=args.team,
            gpu_type=args.gpu_type,
            owner=args.owner,
            kind=args.kind,
        )
    )
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    header = ("UID", "NAME", "TEAM", "OWNER", "GPUS", "STATE", "CREATED")
    _table(
        header, [(w["uid"], w["name"], w["team"], w["owner"], _gpus(w), _state(w), w["created_at"][:19]) for w in rows]
    )
    return EXIT_OK


def _gpus(workload: dict[str, Any]) -> str:
    """'4x p100', or a gang job's '2x4x p100' (nodes, GPUs per node, type)."""
    nodes = workload.get("nodes") or 1
    shape = f"{workload['gpu_count']}×{workload['gpu_type']}"
    return f"{nodes}×{shape}" if nodes > 1 else shape


def cmd_logs(client: PortalClient, args: argparse.Namespace) -> int:
    if not args.follow:
        text = client.logs(args.uid, tail=args.tail, since=args.since, rank=args.rank)
        if args.json:
            print(json.dumps({"uid": args.uid, "rank": args.rank, "logs": text}, indent=2))
        else:
            sys.stdout.write(text)
        return EXIT_OK
    workload = client.workload(args.uid)
    said = None
    while workload["state"] in NOT_STARTED:
        if _state(workload) != said:  # once per state, not a line every 2 s while it queues
            said = _state(workload)
            print(f"gpuportal: {args.uid} is {said}; waiting for its container…", file=sys.stderr, flush=True)
        time.sleep(2)
        workload = client.workload(args.uid)
    for line in client.follow_logs(args.uid, tail=args.tail, since=args.since, rank=args.rank):
        print(line, flush=True)
    return EXIT_OK


def cmd_cancel(client: PortalClient, args: argparse.Namespace) -> int:
    if len(args.uids) == 1:  # the workload itself, as it always was; its refusal is the command's
        workload = client.cancel(args.uids[0])
        _show(args, workload, f"{workload['uid']}  {_state(workload)}")
        return EXIT_OK
    cancelled, code = [], EXIT_OK
    for uid in args.uids:  # one refused (another team's, already ended) does not keep the rest running
        try:
            workload = client.cancel(uid)
        except ApiError as exc:
            print(f"gpuportal: {uid}: {exc.message} (HTTP {exc.status})", file=sys.stderr)
            code = EXIT_FAILED
            continue
        cancelled.append(workload)
        if not args.json:
            print(f"{workload['uid']}  {_state(workload)}", flush=True)
    if args.json:
        print(json.dumps(cancelled, indent=2))
    return code


def cmd_wait(client: PortalClient, args: argparse.Namespace) -> int:
    return _wait(client, args.uid, timeout=args.timeout, interval=args.interval, quiet=args.json)


def cmd_open(client: PortalClient, args: argparse.Namespace) -> int:
    workload = client.workload(args.uid)
    if not workload.get("open_url"):
        print(f"gpuportal: {args.uid} is a batch job; only services can be opened", file=sys.stderr)
        return EXIT_FAILED
    # The path on the portal this CLI talks to (the server's own idea of its address may be an internal one).
    url = client.base_url + urlsplit(workload["open_url"]).path
    _show(args, workload, url)
    if workload["state"] in FINAL:
        print(f"gpuportal: {args.uid} has ended ({_state(workload)}); the page will say so", file=sys.stderr)
    elif workload["state"] != "RUNNING":
        print(f"gpuportal: {args.uid} is {_state(workload)}; the page opens it once it runs", file=sys.stderr)
    if args.browser and not webbrowser.open(url):
        print("gpuportal: no web browser could be started here; open the address above", file=sys.stderr)
    return EXIT_OK


def _proxy_command() -> str:
    """How ssh should start this same client as its ProxyCommand (the installed script where there is one)."""
    script = shutil.which("gpuportal")
    return "gpuportal" if script else f"{shlex.quote(sys.executable)} -m cli.main"


def cmd_ssh(client: PortalClient, args: argparse.Namespace) -> int:
    uid = ssh.uid_from_host(args.uid)
    workload = client.workload(uid)
    if workload["state"] != "RUNNING":
        print(f"gpuportal: {uid} is {_state(workload)}; SSH works once it runs", file=sys.stderr)
        return EXIT_FAILED
    if workload.get("ssh") is False:
        print(f"gpuportal: {uid}'s image does not say it runs an SSH server; trying anyway", file=sys.stderr)
    remote = args.remote[1:] if args.remote[:1] == ["--"] else args.remote
    # The child ssh (and the ProxyCommand it starts) find the portal and token as this process did.
    os.environ["GPUPORTAL_URL"], os.environ["GPUPORTAL_TOKEN"] = client.base_url, client.token
    argv = ssh.ssh_command(
        uid, remote, proxy_command=_proxy_command(), forwards=args.forwards,
        origin=workload.get("ssh_origin", ""),
    )  # fmt: skip
    return ssh.exec_ssh(argv)


def cmd_ssh_proxy(client: PortalClient, args: argparse.Namespace) -> int:
    code = EXIT_OK
    try:
        uid = ssh.uid_from_host(args.host)
        ssh.run_proxy(ssh.tunnel_url(args.origin or client.base_url, uid), client.token)
    except ssh.TunnelError as exc:
        print(f"gpuportal ssh-proxy: {exc}", file=sys.stderr)
        code = exc.code
    # The pod's side ended while the thread copying stdin may still wait in read(): leave now, without the
    # interpreter's shutdown, which would wait for (and abort on) that blocked read.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_ssh_config(client: PortalClient, args: argparse.Namespace) -> int:
    if args.uid:  # asked for by name: its block, whatever its image says
        services = [client.workload(ssh.uid_from_host(args.uid))]
    else:
        services = ssh.reachable(client.workloads(limit=200, kind="service", state=["RUNNING"]))
    print(ssh.config_text(services, command=_proxy_command()), end="")
    return EXIT_OK


# Fields of a workload that make its copy; what the portal sets (state, times, placement) is left out.
CLONED = ("kind", "image", "catalog_image", "gpu_type", "gpu_count", "nodes", "topology", "command", "args", "port", "cpu_millicores",
          "memory_mib", "time_limit_seconds", "restartable", "shared_with_team", "retryable_exit_codes",
          "checkpoint_workspace")  # fmt: skip


def cmd_checkpoint(client: PortalClient, args: argparse.Namespace) -> int:
    """Inside the job: report a checkpoint for this workload ($GPUPORTAL_WORKLOAD, attempt $GPUPORTAL_ATTEMPT)."""
    uid = os.environ.get("GPUPORTAL_WORKLOAD", "")
    if not uid:
        print("gpuportal: GPUPORTAL_WORKLOAD is not set: run this inside a GPU Portal batch job", file=sys.stderr)
        return EXIT_USAGE
    body: dict[str, Any] = {"path": args.path, "note": args.note}
    if args.step is not None:
        body["step"] = args.step
    attempt = os.environ.get("GPUPORTAL_ATTEMPT", "")
    if attempt.isdigit():
        body["attempt"] = int(attempt)
    stored = client.report_checkpoint(uid, body)
    if args.json:
        print(json.dumps(stored, indent=2))
    else:
        step = f" step {stored['step']}" if stored.get("step") is not None else ""
        print(f"checkpoint{step} recorded for {uid} (attempt {stored['attempt']})")
    return EXIT_OK


def cmd_checkpoints(client: PortalClient, args: argparse.Namespace) -> int:
    body = client.checkpoints(args.uid)
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    last = body.get("last")
    if last is None:
        print(f"{args.uid}: no checkpoint reported yet")
        return EXIT_OK
    step = f"step {last['step']}, " if last.get("step") is not None else ""
    print(f"{args.uid}: last checkpoint {step}{last['age']} ago ({last['at']})")
    for c in body.get("checkpoints", [])[:10]:
        step = c["step"] if c["step"] is not None else "-"
        print(f"  attempt {c['attempt']:<3} step {step!s:<10} {c['at']}  {c['path']}")
    return EXIT_OK


def _cloned_spec(source: dict) -> dict:
    """What a clone submits: the source's launch as its API page gives it back."""
    spec = {key: source[key] for key in CLONED if source.get(key) not in (None, [], "")}
    if spec.get("catalog_image"):
        spec.pop("image", None)
    spec["team"] = source["team"]
    if source.get("retry_limit_from_launch") and source.get("retry_limit") is not None:
        spec["retry_limit"] = source["retry_limit"]  # else the clone follows its team's default, as the source did
    if source.get("env"):
        spec["env"] = [{"name": var["name"], "value": var["value"]} for var in source["env"]]
    if source.get("secrets"):
        spec["secrets"] = [{"name": ref["name"], "env": ref.get("env") or ""} for ref in source["secrets"]]
    datasets = [m["name"] for m in source.get("mounts") or [] if m.get("kind") == "dataset" and m.get("name")]
    if datasets:
        spec["datasets"] = datasets
    return spec


def cmd_clone(client: PortalClient, args: argparse.Namespace) -> int:
    source = client.workload(args.uid)
    if any(var.get("value") is None for var in source.get("env") or []):
        print(f"gpuportal: {args.uid}'s environment is its owner's; clone your own workloads", file=sys.stderr)
        return EXIT_FAILED
    spec = _cloned_spec(source)
    if args.name:
        spec["name"] = args.name
    if args.gpus:
        spec["gpu_count"] = args.gpus
    return _submitted(client, args, client.submit(spec))


def cmd_usage(client: PortalClient, args: argparse.Namespace) -> int:
    body = client.get(
        "/usage/", team=args.team, start=args.start, end=args.end, group_by=args.by, user=args.user, format="json"
    )
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    print(f"{body['team']}: {body['start']} to {body['end']}, by {body['group_by']}")
    rows = [(r["key"], f"{r['gpu_hours']:.2f}", f"{r['weighted_gpu_hours']:.2f}") for r in body["rows"]]
    rows.append(("TOTAL", f"{body['total_gpu_hours']:.2f}", f"{body['total_weighted_gpu_hours']:.2f}"))
    _table((body["group_by"].upper(), "GPU-HOURS", "WEIGHTED"), rows)
    return EXIT_OK


def cmd_queue(client: PortalClient, args: argparse.Namespace) -> int:
    team = args.team or _only_team(client)
    body = client.get(f"/teams/{team}/queue/")
    if args.json:
        print(json.dumps(body, indent=2))
        return EXIT_OK
    _table(
        ("GPU TYPE", "QUOTA", "IN USE", "WAITING GPUS"),
        [(q["gpu_type"], q["limit"], q["used"], q["queued"]) for q in body["quotas"]],
    )
    print()
    if not body["queued"]:
        print("Nothing waits.")
        return EXIT_OK
    _table(
        ("#", "UID", "NAME", "OWNER", "GPUS", "STATE"),
        [
            (
                w.get("queue_position") or "",
                w["uid"],
                w["name"],
                w["owner"],
                _gpus(w),
                _state(w),
            )
            for w in body["queued"]
        ],
    )
    return EXIT_OK


def cmd_gpu_types(client: PortalClient, args: argparse.Namespace) -> int:
    types = client.get("/gpu-types/", team=args.team)
    if args.json:
        print(json.dumps(types, indent=2))
        return EXIT_OK
    _table(
        ("SLUG", "NAME", "FREE", "TOTAL", "QUOTA LEFT", "CUDA"),
        [
            (
                t["slug"],
                t["display_name"],
                t["cluster"]["free"],
                t["cluster"]["total"],
                f"{t['quota']['free']} of {t['quota']['limit']}" if t.get("quota") else "no quota",
                # As the launch page says it: the newest CUDA the drivers run; "-" when no node said.
                f"≤ {t['max_cuda_version']}" if t.get("max_cuda_version") else "-",
            )
            for t in types
        ],
    )
    return EXIT_OK


def cmd_datasets(client: PortalClient, args: argparse.Namespace) -> int:
    datasets = client.get("/datasets/", team=args.team)
    if args.json:
        print(json.dumps(datasets, indent=2))
        return EXIT_OK
    _table(("NAME", "MOUNTED AT", "DESCRIPTION"), [(d["name"], d["mount_path"], d["description"]) for d in datasets])
    return EXIT_OK


def cmd_secrets(client: PortalClient, args: argparse.Namespace) -> int:
    secrets = client.get("/secrets/", team=args.team)
    if args.json:
        print(json.dumps(secrets, indent=2))
        return EXIT_OK
    rows = [
        (
            s["name"],
            "team" if s["shared"] else "yours",
            s["owner"],
            s["status"] + (f": {s['message']}" if s["message"] else ""),
        )
        for s in secrets
    ]
    _table(("NAME", "SCOPE", "STORED BY", "STATUS"), rows)
    return EXIT_OK


def cmd_secret_set(client: PortalClient, args: argparse.Namespace) -> int:
    # Never an argument: those end up in shell history and in every process listing.
    if sys.stdin.isatty():
        value = getpass.getpass(f"Value of {args.name} (not shown): ")
    else:
        value = sys.stdin.read().removesuffix("\n")
    body = {"name": args.name, "value": value, "shared": args.shared}
    if args.team:
        body["team"] = args.team
    stored, status = client.store_secret(body)
    if args.json:
        print(json.dumps(stored, indent=2))
    elif status == 201:
        print(f"{args.name}: stored. Attach it with --secret {args.name}[=VARIABLE].")
    else:
        print(f"{args.name}: being written by the portal; a workload that uses it waits until it is.")
    return EXIT_OK


def cmd_secret_delete(client: PortalClient, args: argparse.Namespace) -> int:
    # With -o json, what went: the secret as `secrets -o json` listed it (the API's DELETE answers 204, no body).
    listed = client.get("/secrets/", team=args.team) if args.json else []
    client.delete_secret(args.name, team=args.team)
    if args.json:
        deleted = next((s for s in listed if s["name"] == args.name), {"name": args.name})
        print(json.dumps({"deleted": deleted}, indent=2))
    else:
        print(f"{args.name}: deleted.")
    return EXIT_OK


def cmd_members(client: PortalClient, args: argparse.Namespace) -> int:
    team = args.team or _only_team(client)
    members = client.get(f"/teams/{quote(team, safe='')}/members/")
    if args.json:
        print(json.dumps(members, indent=2))
        return EXIT_OK
    _table(("USERNAME", "ROLE", "JOINED"), [(m["username"], m["role"], m["joined_at"][:10]) for m in members])
    return EXIT_OK


def cmd_members_add(client: PortalClient, args: argparse.Namespace) -> int:
    team = args.team or _only_team(client)
    member = client.add_member(team, args.username, args.role)
    _show(args, member, f"{member['username']} is now a {member['role']} of {team}.")
    return EXIT_OK


def cmd_members_role(client: PortalClient, args: argparse.Namespace) -> int:
    team = args.team or _only_team(client)
    member = client.set_member_role(team, args.username, args.role)
    _show(args, member, f"{member['username']} is now a {member['role']} of {team}.")
    return EXIT_OK


def cmd_members_remove(client: PortalClient, args: argparse.Namespace) -> int:
    team = args.team or _only_team(client)
    # With -o json, who went: the membership as `members -o json` listed it (DELETE answers 204, no body).
    member = client.get(f"/teams/{quote(team, safe='')}/members/{quote(args.username, safe='')}/") if args.json else {}
    client.remove_member(team, args.username)
    if args.json:
        print(json.dumps({"deleted": member}, indent=2))
    else:
        print(f"{args.username} is no longer a member of {team}.")
    return EXIT_OK


COMMANDS = {
    "submit": cmd_submit,
    "list": cmd_list,
    "logs": cmd_logs,
    "cancel": cmd_cancel,
    "wait": cmd_wait,
    "open": cmd_open,
    "checkpoint": cmd_checkpoint,
    "checkpoints": cmd_checkpoints,
    "clone": cmd_clone,
    "usage": cmd_usage,
    "queue": cmd_queue,
    "gpu-types": cmd_gpu_types,
    "datasets": cmd_datasets,
    "secrets": cmd_secrets,
    "secret-set": cmd_secret_set,
    "secret-delete": cmd_secret_delete,
    "members": cmd_members,
    "members-add": cmd_members_add,
    "members-role": cmd_members_role,
    "members-remove": cmd_members_remove,
    "ssh": cmd_ssh,
    "ssh-proxy": cmd_ssh_proxy,
    "ssh-config": cmd_ssh_config,
}


# --- helpers ----------------------------------------------------------------------------------------
def _wait(client: PortalClient, uid: str, *, timeout: float, interval: float, quiet: bool) -> int:
    """Wait for one workload; with `quiet` (--output json) print it as it ended, as JSON, or as last seen
    with `"timed_out": true` when `timeout` ran out (exit 4)."""
    code, workload = _wait_for(client, uid, timeout=timeout, interval=interval, quiet=quiet)
    if quiet:
        print(json.dumps({**workload, "timed_out": True} if code == EXIT_TIMEOUT else workload, indent=2))
    return code


def _wait_for(client: PortalClient, uid: str, *, timeout: float, interval: float, quiet: bool) -> tuple[int, dict]:
    """The exit code and the workload as last seen: at its end, or when `timeout` ran out (EXIT_TIMEOUT)."""
    deadline = time.monotonic() + timeout if timeout > 0 else None
    last = None
    while True:
        workload = client.workload(uid)
        shown = _state(workload)
        if shown != last and not quiet:
            print(f"{uid}  {shown}", file=sys.stderr, flush=True)
            last = shown
        if workload["state"] in FINAL:
            if not quiet and workload["state"] != "SUCCEEDED" and workload.get("message"):
                print(f"  {workload['message']}", file=sys.stderr)
            return (EXIT_OK if workload["state"] == "SUCCEEDED" else EXIT_FAILED), workload
        if deadline is not None and time.monotonic() >= deadline:
            print(f"gpuportal: {uid} still {shown} after {timeout:g}s", file=sys.stderr)
            return EXIT_TIMEOUT, workload
        time.sleep(max(0.1, min(interval, deadline - time.monotonic() if deadline else interval)))


def _state(workload: dict) -> str:
    state = workload["state"]
    if state == "QUEUED":
        shown = f"QUEUED #{workload['queue_position']}" if workload.get("queue_position") else state
        if workload.get("wait_reason"):
            shown += f", starts {_about(workload.get('estimated_start_at'))} (waits for {workload['wait_reason']})"
        return shown
    if workload.get("borrowed") and state not in FINAL:
        return f"{state} [borrowed]"
    if state in ("FAILED", "PENDING") and workload.get("reason"):
        return f"{state} ({workload['reason']})"
    return state


def _about(when: str | None) -> str:
    """An estimated start for people: "about 40 min" (the portal's own wording)."""
    if not when:
        return "not within a week"
    seconds = (datetime.fromisoformat(when.replace("Z", "+00:00")) - datetime.now(UTC)).total_seconds()
    minutes = max(0.0, seconds) / 60
    if minutes < 1:
        return "within a minute"
    if minutes < 10:
        return f"about {round(minutes)} min"
    if minutes < 90:
        return f"about {int(5 * round(minutes / 5))} min"
    if minutes < 36 * 60:
        return f"about {round(minutes / 60)} h"
    return f"about {round(minutes / 1440)} days"


def _table(header: tuple, rows: list[tuple]) -> None:
    table = [header, *rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _only_team(client: PortalClient) -> str:
    teams = client.get("/teams/")
    if len(teams) != 1:
        names = ", ".join(t["slug"] for t in teams) or "none"
        raise ApiError(400, f"you are in several teams ({names}); say which with --team", {"team": ["required"]})
    return teams[0]["slug"]


def _show(args: argparse.Namespace, workload: dict, text: str) -> None:
    print(json.dumps(workload, indent=2) if args.json else text)


if __name__ == "__main__":
    sys.exit(main())
