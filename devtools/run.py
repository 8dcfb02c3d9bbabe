"""`make run`: everything a developer needs, in one process tree; Ctrl-C stops all of it.

1. The local GPU cluster, unless KUBECONFIG is set: binaries built/verified by localcluster/build.sh (with
   progress), then a cluster owned by this process in var/cluster (or the one `make cluster-up` runs).
2. A throwaway Redis (this portal's broker and cache, given to every process), unless REDIS_URL or
   CELERY_BROKER_URL is set.
3. `manage.py migrate`, then `manage.py seed_demo` when that command exists (demo admin, team, GPU types).
4. Celery worker and beat, `manage.py track` when it exists, `manage.py runserver` on a private port, and
   in front of it the service proxy (`python -m proxy`) on 127.0.0.1:PORT: it serves /w/<uid>/ (the
   services researchers open) and passes every other path to the development server, so one origin
   serves both, as the ingress does in production.
On the local cluster the admin's kubeconfig only sets the cluster up: the portal's processes run as the
chart's least-privilege identities (devtools/rbac.py, helm/files/rbac-rules.yaml), installed into
`portal-system` with a kubeconfig each (mode 0600) in <state dir>/portal-identity/: the worker, tracker,
migrations and seed as the engine, the provisioner as the provisioner, the web and beat as the web
(which writes nothing in the cluster), the service proxy as the proxy (reads services and EndpointSlices in
team namespaces only).
Every child's output is prefixed with its name. SIGINT/SIGTERM, and SIGHUP when its terminal goes away, stop the
children in reverse order; so does its parent (make) dying, which sends it SIGTERM. Killed outright itself (SIGKILL),
it takes every child with it: each asks the kernel for SIGKILL when the run dies (PR_SET_PDEATHSIG), as the
cluster's components do.
Secrets are sealed to a key pair made once in var/seal-private.key (kept, so what an earlier run sealed
still opens): the public half goes to every process, the private half to the worker only.
With the real nodes (two by default where the machine can run them: root, cgroup v1, containerd; else
simulated nodes only, said in one line; GPUPORTAL_REAL_NODES=0 turns them off) the catalog offers the images
built here (GPUPORTAL_LOCAL_IMAGES=1): Open on the local JupyterLab shows a real JupyterLab. Their pods reach
the portal's API through a relay on the nodes' bridge gateway (PORTAL_POD_API_URL, for `gpuportal checkpoint`).
PORT is bound first, before anything else starts, and handed to the proxy as a listening socket: a port another
process serves is refused at once, as is a cluster state directory another `make run` of this checkout holds
(a second portal wants a checkout of its own).
Environment: PORT (default 8000; 1 to 65535), LOCALCLUSTER_STATE_DIR (default var/cluster), GPUPORTAL_REAL_NODES.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from devtools.engine import ENGINE_ONLY, PortalIdentity, install_identity, provisioner_argv
from devtools.services import RedisServer, ServiceError, free_port
from localcluster.procs import ask_to_die_with_parent, die_with_parent
from portal.env import ConfigError
from portal.sealing import generate_keypair, public_half

REPO = Path(__file__).resolve().parent.parent
VAR = REPO / "var"


def parse_port(raw: str) -> int:
    """PORT as a number from 1 to 65535, or 0 when it is none (main() then says so, naming PORT)."""
    raw = raw.strip()
    if raw.isascii() and raw.isdigit() and 1 <= int(raw) <= 65535:
        return int(raw)
    return 0


PORT_SETTING = os.environ.get("PORT", "8000")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PORT = parse_port(PORT_SETTING)


def say(message: str) -> None:
    _write(sys.stderr, f"[run] {message}")


def _write(stream: IO[str], text: str) -> None:
    """A line to the terminal, which may have gone (a closed window: EIO; a reader gone: EPIPE): the run then
    goes on, and stops everything on the hang-up, without a word rather than stopping half-way."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=stream, flush=True)


class Stop(Exception):
    """SIGINT/SIGTERM/SIGHUP, or a child that died: stop everything."""


def _pump(name: str, stream: IO[bytes], sink: list[str] | None) -> None:
    width = 8
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        if sink is not None:
            sink.append(line)
        _write(sys.stdout, f"{name:<{width}}| {line}")  # and read on: a child must never block on its output


class Children:
    """The long-running children, stopped in reverse start order."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(
        self, name: str, argv: list[str], env: dict[str, str], pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            pass_fds=pass_fds,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us only; we stop children in order
            # ...and if we are killed outright (SIGKILL, the OOM killer), the kernel ends them: nothing we
            # started is left running, holding the port, the Redis and the cluster's files. Started from the main
            # thread only (the signal follows the forking thread's end).
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        assert proc.stdout is not None
        threading.Thread(target=_pump, args=(name, proc.stdout, None), daemon=True).start()
        self.procs.append((name, proc))
        return proc

    def dead(self) -> tuple[str, int] | None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                return name, proc.returncode
        return None

    def stop(self) -> None:
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                say(f"stopping {name}")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)
        self.procs.clear()


def run_once(name: str, argv: list[str], env: dict[str, str]) -> list[str]:
    """Run a setup command to completion with prefixed output; returns its output lines."""
    lines: list[str] = []
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    _pump(name, proc.stdout, lines)
    if proc.wait() != 0:
        raise ServiceError(f"`{' '.join(argv[1:])}` failed with exit code {proc.returncode} (output above)")
    return lines


# Celery warns at length when a worker runs as root. Here every process of the run does (the real nodes'
# kubelet and containerd need root, and `make run` is one process tree); what the warning is about, code run
# from a message, cannot happen: the workers accept JSON only (portal/settings.py CELERY_ACCEPT_CONTENT), and
# as root Celery refuses pickle outright. So this one warning is silenced for `make run`'s workers only, and
# the run says so in one line. The chart and compose run every process as a non-root user.
ROOT_WARNING_FILTER = "ignore:You're running the worker with superuser privileges:UserWarning"


def celery_argv(python: str, argv: list[str]) -> list[str]:
    """`python -m celery ...` (argv: what follows `-m celery`), without the root warning when run as root."""
    quiet = ["-W", ROOT_WARNING_FILTER] if os.geteuid() == 0 else []
    return [python, *quiet, "-m", "celery", *argv]


# Services outlive `make run`: their Deployments stay in the cluster's store, and the next run's cluster
# starts their pods again. Counted at Ctrl-C, so that nobody is surprised.
_COUNT_SERVICES = (
    "from jobs.models import State, Workload; "
    "print(Workload.objects.filter(kind='service').exclude(state__in=State.final()).count())"
)


def report_services_left(python: str, env: dict[str, str]) -> None:
    """Say how many services have not ended, that they come back with the next run, and how to end them."""
    try:
        out = subprocess.run([python, "manage.py", "shell", "-c", _COUNT_SERVICES], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
        left = int(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return  # a database that is not there: nothing to say
    if left:
        say(
            f"{left} service(s) not ended: the next `make run` starts them again with its cluster; end them "
            "there with Cancel on their pages (or `gpuportal list --kind service`, `gpuportal cancel UID`)."
        )


def management_command_exists(name: str) -> bool:
    return any(REPO.glob(f"*/management/commands/{name}.py"))


def start_cluster(env: dict[str, str], stack: contextlib.ExitStack) -> str:
    """Build/verify the binaries, then start (or reuse) the local cluster; returns the kubeconfig path."""
    from localcluster import ClusterError, LocalCluster
    from localcluster.__main__ import read_state, supervisor_pid

    state_dir = Path(env.get("LOCALCLUSTER_STATE_DIR") or VAR / "cluster")
    state = read_state(state_dir)
    if supervisor_pid(state_dir) and state.get("state") == "ready":
        say(f"using the cluster `make cluster-up` started ({state['kubeconfig']})")
        return str(state["kubeconfig"])
    refuse_a_held_state_dir(state_dir)
    say("checking the Kubernetes binaries (built once and cached; the first build takes ~5 minutes)")
    build = subprocess.run(["bash", str(REPO / "localcluster" / "build.sh")], cwd=REPO, stdout=subprocess.PIPE)
    if build.returncode != 0:
        raise ServiceError("building the Kubernetes binaries failed (see the [cluster-build] lines above)")
    real = choose_real_nodes(env)
    cluster = LocalCluster(state_dir=state_dir, real_nodes=real, log=_cluster_log)
    try:
        cluster.start()
    except ClusterError as exc:
        if not real:
            raise ServiceError(f"the local GPU cluster did not start:\n{exc}") from exc
        say(f"real nodes did not start, simulated nodes only: {_first_line(exc)}")
        cluster.stop()
        env.pop("GPUPORTAL_LOCAL_IMAGES", None)
        cluster = LocalCluster(state_dir=state_dir, real_nodes=0, log=_cluster_log)
        try:
            cluster.start()
        except ClusterError as exc2:
            raise ServiceError(f"the local GPU cluster did not start:\n{exc2}") from exc2
    stack.callback(_stop_cluster, cluster)
    return str(cluster.kubeconfig)


def _cluster_log(message: str) -> None:
    _write(sys.stderr, f"[localcluster] {message}")  # its own words, which a terminal gone must not cut short


def _stop_cluster(cluster) -> None:
    # Tens of seconds with real nodes: said, so a Ctrl-C'd run does not look stuck after its processes stop.
    say("stopping the local cluster (real nodes first, then the control plane)")
    cluster.stop()


def refuse_a_held_state_dir(state_dir: Path) -> None:
    """A cluster state directory whose lock another process holds is another `make run` of this checkout (a
    `make cluster-up` cluster is reused above): said in words, before anything is built or started. The
    cluster's own message would follow "real nodes did not start" and name `localcluster down` as the fix,
    which stops the first portal's cluster."""
    import fcntl

    with contextlib.suppress(FileNotFoundError), open(state_dir / "lock") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ServiceError(
                f"the local cluster's state directory {state_dir} is in use by another `make run` of this checkout "
                "(or a `make cluster-up` still starting); "
                "a second portal needs a checkout of its own (its cluster, database and keys live in its var/): "
                f"`git worktree add ../gpuportal-2 && cd ../gpuportal-2 && PORT={PORT if PORT != 8000 else 8001} make run`"
            ) from None
        fcntl.flock(lock, fcntl.LOCK_UN)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]


def choose_real_nodes(env: dict[str, str]) -> int:
    """How many real nodes (kubelet + containerd, localcluster/realnode.py) this cluster gets: two by default,
    GPUPORTAL_REAL_NODES when set; none where the machine cannot run them, said in one line. With real nodes
    the catalog offers the images built here (GPUPORTAL_LOCAL_IMAGES=1) and each node imports them."""
    from localcluster import ClusterError
    from localcluster.realnode import check_host, requested_count

    if "GPUPORTAL_REAL_NODES" in env:
        count = requested_count(env)
        if not count:
            say("GPUPORTAL_REAL_NODES=0: simulated nodes only")
            return 0
    else:
        count = requested_count({"GPUPORTAL_REAL_NODES": "1"})
    try:
        check_host()
    except ClusterError as exc:
        say(f"real nodes off, simulated nodes only: {_first_line(exc)}")
        return 0
    env.setdefault("GPUPORTAL_LOCAL_IMAGES", "1")
    # The cluster reads this from our own environment when it imports images into each node.
    os.environ.setdefault("GPUPORTAL_REAL_NODE_IMAGES", "python,jupyterlab,tensorboard,devenv")
    say(f"{count} real nodes (kubelet + containerd, GPUs from our device plugin); the first run builds their images")
    return count


def real_nodes_gateway(state_dir: Path) -> str:
    """The real nodes' bridge gateway (an address of this machine their pods reach), from the network the
    nodes keep in <state dir>/real/network.json; "" without real nodes."""
    import ipaddress

    from localcluster.realnode import Network

    try:
        saved = json.loads((state_dir / "real" / "network.json").read_text())
        return Network(ipaddress.ip_network(saved["subnet"]), str(saved["bridge"]), 1).gateway
    except (OSError, ValueError, KeyError):
        return ""


def relay_for_pods(env: dict[str, str], stack: contextlib.ExitStack) -> None:
    """Pods on the real nodes reach the portal's API (GPUPORTAL_API_URL: `gpuportal checkpoint` inside a batch
    job) through a relay on the nodes' bridge gateway to the portal's port on loopback (localcluster/hostrelay.py:
    pods cannot reach 127.0.0.1, where the portal listens). Without real nodes, or with PORTAL_POD_API_URL set,
    nothing is done (pods are then not told where the portal is)."""
    from localcluster.hostrelay import HostRelays

    if env.get("PORTAL_POD_API_URL"):
        return
    gateway = real_nodes_gateway(Path(env.get("LOCALCLUSTER_STATE_DIR") or VAR / "cluster"))
    if not gateway:
        return
    relays = HostRelays(gateway)
    try:
        port = relays.tcp(("127.0.0.1", PORT))
    except OSError as exc:  # the bridge is not up (real nodes off in this run)
        relays.close()
        say(f"pods are not told where the portal is: no relay on {gateway} ({exc.strerror or exc})")
        return
    stack.callback(relays.close)
    env["PORTAL_POD_API_URL"] = f"http://{gateway}:{port}"
    # The pods' requests name that address as their Host.
    env["ALLOWED_HOSTS"] = ",".join([env.get("ALLOWED_HOSTS") or "127.0.0.1,localhost,[::1]", gateway])
    say(f"pods reach the portal's API at {env['PORTAL_POD_API_URL']} (a relay to 127.0.0.1:{PORT})")


def hold_port(port: int) -> socket.socket:
    """The portal's port, bound and listening from the moment `make run` starts until the proxy serves on it
    (it inherits the socket): a port another process serves, most often a first `make run` on the default
    8000 (even one still setting up), is refused in one line that says who holds it and how to pick another,
    rather than after a cluster and a database were set up for a proxy that then cannot listen."""
    from localcluster.procs import port_owner

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: TIME_WAIT does not block
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise ServiceError(
            f"port {port} is in use by {port_owner(port)} (another `make run`?); "
            f"serve this portal on another port: PORT={next_free_port(port)} make run"
        ) from exc
    return listener


def next_free_port(port: int) -> int:
    """The first port above `port` that nothing listens on (a first portal on 8000 and a second on 8001: the
    advice for a third is 8002), for the advice only: it is bound again when that run starts."""
    for candidate in range(port + 1, min(port + 100, 65536)):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as hold_port binds it
            try:
                probe.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    return port + 1 if port < 65535 else 8001


def seal_keys(env: dict[str, str]) -> dict[str, str]:
    """Give `env` (every process) the public key and return what only the worker gets: the private key."""
    worker = {name: env.pop(name) for name in ENGINE_ONLY if env.get(name)}
    if not worker:
        path = VAR / "seal-private.key"
        if not path.exists():
            _, private = generate_keypair()
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(private + "\n")
            say(f"made the key pair for sealed secrets ({path}, for the worker only)")
        worker = {"PORTAL_SEAL_PRIVATE_KEY_FILE": str(path)}
    private = worker.get("PORTAL_SEAL_PRIVATE_KEY") or Path(worker["PORTAL_SEAL_PRIVATE_KEY_FILE"]).read_text().strip()
    try:
        env.setdefault("PORTAL_SEAL_PUBLIC_KEY", public_half(private, name="the worker's private key"))
    except ConfigError as exc:
        raise ServiceError(str(exc)) from exc
    return worker


IDENTITY_NAMESPACE = "portal-system"


def install_portal_identities(env: dict[str, str]) -> PortalIdentity:
    """With the admin's kubeconfig (env KUBECONFIG), the accounts and roles the chart would make, under fixed
    names so a cluster `make run` reuses keeps its team namespaces and their bindings."""
    import yaml
    from kubernetes import config

    admin_kubeconfig = Path(env["KUBECONFIG"])
    server = yaml.safe_load(admin_kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    state_dir = Path(env.get("LOCALCLUSTER_STATE_DIR") or VAR / "cluster")
    admin = config.new_client_from_config(config_file=str(admin_kubeconfig))
    try:
        return install_identity(
            admin_api=admin,
            server=server,
            admin_kubeconfig=admin_kubeconfig,
            directory=state_dir / "portal-identity",
            namespace=IDENTITY_NAMESPACE,
            fullname="gpuportal",
            instance=env.get("PORTAL_INSTANCE") or "default",
            namespace_prefix=env.get("KUBE_NAMESPACE_PREFIX") or "gpuportal-",
        )
    finally:
        admin.close()


def connect_telemetry(env: dict[str, str], stack: contextlib.ExitStack, python: str) -> None:
    """The local cluster's simulated node agents report to this portal, so the GPU charts fill (a real
    deployment runs the agent DaemonSet instead). Only for a local cluster: it has a simulator."""
    state_dir = Path(env.get("LOCALCLUSTER_STATE_DIR") or VAR / "cluster")
    if not (state_dir / "simulator.json").exists():
        return
    command = [python, "-m", "devtools.local_telemetry", "--state-dir", str(state_dir)]
    run_once("telemetry", [*command, "--portal-url", f"http://127.0.0.1:{PORT}"], env)
    stack.callback(_quietly, lambda: run_once("telemetry", [*command, "--disconnect"], env))


def _quietly(step) -> None:
    # Shutting down: a step that fails has said why in its output; the rest of the shutdown goes on.
    with contextlib.suppress(ServiceError):
        step()


def local_images_seed(env: dict[str, str]) -> list[str]:
    """seed_demo's arguments for the catalog of the images built on this machine (localhost/...), when
    GPUPORTAL_LOCAL_IMAGES=1: written to a file in var/ for the command to read."""
    if env.get("GPUPORTAL_LOCAL_IMAGES") != "1":
        return []
    from localcluster.images import catalog_seed

    path = VAR / "local-images-seed.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(catalog_seed(quota_team="demo")))
    return ["--seed", str(path)]


def main() -> int:
    env = dict(os.environ)
    env.setdefault("DEBUG", "1")
    # Webhooks to a receiver on this machine (a local chat server, a test listener) are allowed here;
    # a deployment allows only public addresses unless it says otherwise.
    env.setdefault("NOTIFY_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
    # The web believes X-Forwarded-For from the proxy on loopback, which writes the browser's address there:
    # sign-in lockouts then count each (username, browser address), not everyone as the proxy.
    env.setdefault("TRUSTED_PROXIES", "127.0.0.1/32,::1/128")
    env["PYTHONUNBUFFERED"] = "1"
    VAR.mkdir(exist_ok=True)
    python = sys.executable

    def on_signal(signum: int, frame: object) -> None:
        raise Stop(signal.Signals(signum))

    # SIGHUP: the terminal went away (its window closed, an SSH session dropped). The children run in
    # sessions of their own and never hear it: without this they would run on, holding the port.
    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    # `make run` killed outright (make is our parent): we hear SIGTERM and stop everything in order, as on Ctrl-C.
    ask_to_die_with_parent(signal.SIGTERM)
    children = Children()
    # Each process's environment: the admin's until the local cluster's portal identities exist.
    as_identity: dict[str, dict[str, str]] = {}

    def env_of(identity: str) -> dict[str, str]:
        return as_identity.get(identity, env)

    if not PORT:
        say(f"ERROR: PORT must be a port number from 1 to 65535 (got {PORT_SETTING!r}), e.g. PORT=8001 make run")
        return 1
    with contextlib.ExitStack() as stack:
        try:
            listener = hold_port(PORT)
            stack.callback(say, "stopped: nothing this run started is left running")  # the last word
            stack.callback(listener.close)  # the proxy holds its own copy
            worker_only = seal_keys(env)  # before the identities' environments are copied from env
            # The broker and cache before any process's environment is copied from env: every process of this
            # portal, and only this portal's, uses this Redis (settings have no default broker).
            if not env.get("REDIS_URL") and not env.get("CELERY_BROKER_URL"):
                redis = RedisServer()
                env["REDIS_URL"] = redis.start()
                stack.callback(redis.stop)
                say(f"throwaway Redis on {env['REDIS_URL']} (this portal's broker and cache)")
            # Addresses the portal writes (the API's open_url, the sign-in lines) name the port it serves on.
            env.setdefault("SITE_URL", f"http://127.0.0.1:{PORT}")
            if not env.get("KUBECONFIG"):
                env["KUBECONFIG"] = start_cluster(env, stack)
                relay_for_pods(env, stack)  # before the identities' environments are copied from env
                # The local cluster's node simulator provisions this class from directories in var/.
                env.setdefault("WORKSPACE_STORAGE_CLASS", "gpuportal-local")
                identity = install_portal_identities(env)
                as_identity = {name: {**env, **identity.env_as(name)} for name in identity.kubeconfigs}
                say(
                    f"portal processes run as least-privilege service accounts in {IDENTITY_NAMESPACE} "
                    f"(kubeconfigs in {identity.kubeconfigs['web'].parent}); the admin kubeconfig only set them up"
                )
            else:
                say(f"using KUBECONFIG={env['KUBECONFIG']} for every portal process")
            run_once("migrate", [python, "manage.py", "migrate", "--noinput"], env_of("engine"))
            seeded: list[str] = []
            if management_command_exists("seed_demo"):
                seeded = run_once("seed", [python, "manage.py", "seed_demo", *local_images_seed(env)], env_of("engine"))
            stack.callback(children.stop)
            if os.geteuid() == 0:
                say(
                    "the workers run as root, as every process of this run (see ROOT_WARNING_FILTER in devtools/run.py)"
                )
            worker = celery_argv(python, ["-A", "portal", "worker", "-l", "info"])
            children.start("worker", worker, {**env_of("engine"), **worker_only})  # the private key: its alone
            # Team namespaces are made only by the provisioner, a worker on its own queue (as in the chart).
            children.start("provisioner", celery_argv(python, provisioner_argv(python)[3:]), env_of("provisioner"))
            schedule = str(Path(env.get("PORTAL_VAR_DIR") or VAR) / "celerybeat-schedule")
            children.start(
                "beat",
                celery_argv(python, ["-A", "portal", "beat", "-l", "info", "-s", schedule]),
                env_of("web"),  # as in the chart: beat only schedules, and holds the web's (read-only) identity
            )
            if management_command_exists("track"):
                children.start("track", [python, "manage.py", "track"], env_of("engine"))
            # One origin for the portal and its services, as in production behind the ingress: the service
            # proxy listens on PORT, serves /w/<uid>/ itself and passes every other path to the Django
            # development server on a private port.
            web_port = free_port()
            runserver = [python, "manage.py", "runserver", f"127.0.0.1:{web_port}", "--noreload"]
            children.start("web", runserver, env_of("web"))
            _wait_for_port(web_port, children)
            children.start(
                "proxy",
                [python, "-m", "proxy", "--fd", str(listener.fileno()),
                 "--portal-upstream", f"http://127.0.0.1:{web_port}"],
                env_of("proxy"),
                pass_fds=(listener.fileno(),),
            )  # fmt: skip
            listener.close()  # the proxy's now: its port frees when the proxy ends
            connect_telemetry(env_of("engine"), stack, python)
            _announce(seeded, env)
            while True:
                time.sleep(0.5)
                dead = children.dead()
                if dead:
                    say(f"{dead[0]} exited with code {dead[1]}; stopping everything")
                    return 1
        except Stop as stop:
            why = {signal.SIGHUP: "the terminal hung up", signal.SIGTERM: "SIGTERM"}.get(stop.args[0], "Ctrl-C")
            say(f"stopping ({why})")
            report_services_left(python, env_of("web"))
            return 0
        except ServiceError as exc:
            say(f"ERROR: {exc}")
            return 1
        finally:
            # A second Ctrl-C (or hang-up) must not cut the orderly shutdown short.
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
    return 0


def _wait_for_port(port: int, children: Children, timeout: float = 120.0) -> None:
    """Until the development server listens (so the first page through the proxy is the portal's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        dead = children.dead()
        if dead:
            raise ServiceError(f"{dead[0]} exited with code {dead[1]}")
        time.sleep(0.2)
    raise ServiceError(f"the development server did not listen on port {port} within {timeout:.0f} s")


def _announce(seeded: list[str], env: dict[str, str]) -> None:
    lines = [f"GPU Portal: http://127.0.0.1:{PORT}/", f"cluster:    KUBECONFIG={env['KUBECONFIG']}"]
    login = [line for line in seeded if any(w in line.lower() for w in ("login", "user", "password", "token"))]
    if login:
        lines += login
    elif seeded:
        lines += seeded[-5:]
    else:
        lines.append("login:      no demo data yet (manage.py seed_demo does not exist); create a user with")
        lines.append("            `.venv/bin/python manage.py createsuperuser`")
    lines.append("Press Ctrl-C to stop everything.")
    width = max(len(line) for line in lines)
    _write(sys.stderr, "\n" + "=" * width + "\n" + "\n".join(lines) + "\n" + "=" * width + "\n")


if __name__ == "__main__":
    sys.exit(main())
