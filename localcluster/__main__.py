"""python -m localcluster {up,down,run,status} [--state-dir DIR] [--pools FILE] [--port N]

up      start the cluster in the background (a detached supervisor owns every component), wait until the
        nodes are Ready, print progress to stderr and `KUBECONFIG=<path>` as the last line of stdout
down    stop it; nothing keeps running, the state directory stays (next `up` reuses it)
run     the same cluster in the foreground; Ctrl-C stops it
status  say whether it runs, and where its kubeconfig is
Errors end in one message naming the cause and the fix (exit code 1), never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from localcluster.cluster import REPO_ROOT, LocalCluster, describe_failure
from localcluster.pools import DEFAULT_POOLS_FILE, PoolsError, load_pools
from localcluster.procs import ClusterError, kill_pid, log_tail, pid_alive, reap_stale
from localcluster.realnode import teardown

DEFAULT_STATE_DIR = REPO_ROOT / "var" / "cluster"
UP_TIMEOUT = 180.0


def say(message: str) -> None:
    print(f"[localcluster] {message}", file=sys.stderr, flush=True)


def read_state(state_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((state_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return {}


def write_state(state_dir: Path, **fields: Any) -> None:
    path = state_dir / "cluster.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields, indent=2) + "\n")
    tmp.replace(path)


def supervisor_pid(state_dir: Path) -> int | None:
    """The pid of a live supervisor for this state dir, if any (checked against its command line)."""
    pid = read_state(state_dir).get("pid")
    if isinstance(pid, int) and pid_alive(pid):
        with contextlib.suppress(OSError):
            if str(state_dir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return pid
    return None


# -- run (foreground, and the body of the detached supervisor)
class _Stop(Exception):
    pass


def cmd_run(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    pools = load_pools(args.pools)
    state_dir.mkdir(parents=True, exist_ok=True)

    def on_signal(signum: int, frame: object) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    cluster = LocalCluster(state_dir, pools, apiserver_port=args.port)
    write_state(state_dir, state="starting", pid=os.getpid())
    try:
        try:
            info = cluster.start()
        except ClusterError as exc:
            write_state(state_dir, state="failed", pid=os.getpid(), error=str(exc))
            say(f"ERROR: {exc}")
            return 1
        write_state(
            state_dir,
            state="ready",
            pid=os.getpid(),
            kubeconfig=str(info.kubeconfig),
            server=info.server,
            components={n: c.pid for n, c in cluster.components.items()},
        )
        if not args.supervised:
            say("running; press Ctrl-C to stop")
            print(f"KUBECONFIG={info.kubeconfig}", flush=True)
        restarts: dict[str, int] = {}
        while True:
            time.sleep(1.0)
            for name, component in cluster.components.items():
                if component.alive() or component.expected_stop:
                    continue
                # A component died under us: say why, and restart it a few times before giving up.
                restarts[name] = restarts.get(name, 0) + 1
                tail = log_tail(component.log_path)
                say(f"{name} exited (code {component.exit_code()}); its log ends:\n{tail}")
                if restarts[name] > 5:
                    say(f"{name} keeps failing; stopping the cluster")
                    return 1
                with contextlib.suppress(ClusterError):
                    cluster.start_component(name)
    except _Stop:
        say("stopping")
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cluster.stop()
        state = read_state(state_dir)
        if state.get("pid") == os.getpid() and state.get("state") != "failed":
            write_state(state_dir, state="stopped", pid=None)


# -- up / down / status ------------------------------------
def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    load_pools(args.pools)  # a bad pools file is reported here, not in the detached log
    running = supervisor_pid(state_dir)
    state = read_state(state_dir)
    if running and state.get("state") == "ready":
        say(f"already running (supervisor pid {running})")
        print(f"KUBECONFIG={state['kubeconfig']}", flush=True)
        return 0
    if running:
        say(f"a supervisor (pid {running}) is still starting or stuck; stopping it first")
        kill_pid(running, timeout=15)
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "logs" / "supervisor.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    offset = log_path.stat().st_size if log_path.exists() else 0
    write_state(state_dir, state="launching", pid=None)
    argv = [sys.executable, "-m", "localcluster", "run", "--supervised", "--state-dir", str(state_dir)]
    argv += ["--pools", str(args.pools)] + (["--port", str(args.port)] if args.port else [])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + UP_TIMEOUT
    try:
        return _wait_up(proc, state_dir, log_path, offset, deadline)
    except KeyboardInterrupt:
        say(f"interrupted; stopping the cluster that was starting (supervisor pid {proc.pid})")
        kill_pid(proc.pid, timeout=30)
        return 130


def _wait_up(proc: subprocess.Popen[bytes], state_dir: Path, log_path: Path, offset: int, deadline: float) -> int:
    while True:
        offset = _echo_new(log_path, offset)
        state = read_state(state_dir)
        if state.get("state") == "ready" and state.get("pid") == proc.pid:
            how = (
                "`make cluster-down`"
                if state_dir == DEFAULT_STATE_DIR
                else f"`python -m localcluster down --state-dir {state_dir}`"
            )
            say(f"cluster is up (supervisor pid {proc.pid}); stop it with {how}")
            print(f"KUBECONFIG={state['kubeconfig']}", flush=True)
            return 0
        if proc.poll() is not None:
            _echo_new(log_path, offset)
            say(f"the cluster failed to start (details above; full log: {log_path})")
            return 1
        if time.monotonic() > deadline:
            kill_pid(proc.pid, timeout=15)
            say(f"the cluster was not ready after {UP_TIMEOUT:.0f}s; logs: {state_dir / 'logs'}")
            return 1
        time.sleep(0.2)


def _echo_new(path: Path, offset: int) -> int:
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
        if data:
            sys.stderr.write(data.decode(errors="replace"))
            sys.stderr.flush()
        return offset + len(data)
    return offset


def cmd_down(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    pid = supervisor_pid(state_dir)
    if pid:
        say(f"stopping the cluster (supervisor pid {pid})")
        kill_pid(pid, timeout=40)
    # Whatever a crashed supervisor left behind (normally nothing: components die with it). But if a
    # live process still holds the state dir's lock (`make run` owns its cluster in-process), its
    # components are not stale: leave them to it.
    lock_path = state_dir / "lock"
    if lock_path.exists():
        with open(lock_path, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"the cluster in {state_dir} belongs to another running process (e.g. `make run`); "
                    "stop that process (Ctrl-C) instead")  # fmt: skip
                return 1
            reap_stale(state_dir / "run", str(state_dir), say)
            teardown(state_dir / "real", say)
            fcntl.flock(lock, fcntl.LOCK_UN)
    if read_state(state_dir):
        write_state(state_dir, state="stopped", pid=None)
    say("stopped; nothing is running" if pid else "no cluster was running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = read_state(args.state_dir)
    pid = supervisor_pid(args.state_dir)
    if pid and state.get("state") == "ready":
        print(f"running (supervisor pid {pid}), server {state.get('server')}")
        print(f"KUBECONFIG={state.get('kubeconfig')}")
        return 0
    print(f"not running (state dir {args.state_dir})" if not pid else f"{state.get('state')} (pid {pid})")
    return 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "down", "run", "status"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="default: var/cluster")
        p.add_argument("--pools", type=Path, default=DEFAULT_POOLS_FILE, help="node pools YAML")
        p.add_argument("--port", type=int, default=None, help="API server port (default: a free one)")
        p.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.state_dir = args.state_dir.resolve()
    commands = {"up": cmd_up, "down": cmd_down, "run": cmd_run, "status": cmd_status}
    try:
        return commands[args.command](args)
    except (ClusterError, PoolsError) as exc:
        say(f"ERROR: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one clear line instead of a traceback, as promised
        say(f"ERROR: {describe_failure(exc)}")
        return 1


if __name__ == "__main__":
    threading.current_thread().name = "localcluster"
    sys.exit(main())
