"""The chart installed for real (issue 35, item 6): `helm install` (Helm's own Go code, helm_python) of helm/ on
the local cluster with the portal's image built here (localcluster/images.py, the project's Dockerfile), every
portal process a pod on the real nodes (kubelet + containerd + runc; tests/realnode_fixtures.py): web, worker,
beat, tracker, proxy, provisioner and the agent DaemonSet; the migration hook Job migrates the database before
install, the seed Job loads the GPU types and the JupyterLab entry after it. Then Chromium signs in on the
chart's web pod, launches JupyterLab with a GPU, presses Open and runs a notebook cell through the chart's proxy.

How the parts find each other here, with values only (the templates stay as a real cluster needs them):
- PostgreSQL and Redis are external (postgresql.enabled / redis.enabled false): the test session's servers,
  reached from the pods at the real nodes' bridge gateway through relays (localcluster/hostrelay.py), since
  those servers listen on loopback. A database of its own, a Redis database number of its own.
- The Kubernetes API: the local cluster has no kube-proxy, so the `kubernetes` Service's ClusterIP that the
  kubelet hands every pod (KUBERNETES_SERVICE_HOST) routes nowhere. extraEnv names the gateway instead, where
  a TLS relay with a certificate from the cluster's CA passes the pods' own service-account tokens through.
- Browser to portal: the chart's ingress would route a host name to the web Service and the apps' origin
  (proxy.origin, the production setting) to the proxy's; here Chromium's resolver maps those names to the web
  and proxy pods themselves (pods on the bridge answer the host), as DNS and an ingress controller would.
- The proxy reaches JupyterLab as it does anywhere: the pod address from the Service's EndpointSlices.
- The admission webhook is off (rbac.admissionWebhook=never): the API server would call it through its
  Service's ClusterIP. The local cluster runs the same guard itself.

First run: the portal's image is built (~5 min here, then cached by the files that go into it).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.deploy.helm import CHART_DIR, REPO_ROOT, with_seal

pytestmark = [pytest.mark.cluster, pytest.mark.images, pytest.mark.browser, pytest.mark.slow]

PORTAL_HOST = "portal.gpuportal.test"
APPS_HOST = "apps.gpuportal.test"
WEB_PORT, PROXY_PORT = 8000, 8080  # the web's and the proxy's container ports (templates/web.yaml, proxy.yaml)
TEAM, USER, PASSWORD = "chart-team", "chart-alice", "chart-test-password-1"
COMPONENTS = ("web", "worker", "beat", "tracker", "proxy", "provisioner")


def log(line: str) -> None:
    print(f"[chart] {line}", file=sys.stderr, flush=True)


class Installed:
    def __init__(self, namespace: str, name: str, prefix: str, database_url: str) -> None:
        self.namespace, self.name, self.prefix, self.database_url = namespace, name, prefix, database_url
        self.fullname = f"{name}-gpuportal"


def chart_values(*, image: str, gateway: str, api_port: int, database_url: str, redis_url: str, prefix: str) -> dict:
    from localcluster.images import catalog_seed
    from localcluster.realnode import REAL_LABEL

    repository, tag = image.rsplit(":", 1)
    seed = catalog_seed(quota_team=TEAM)
    on_real_nodes = {"nodeSelector": {REAL_LABEL: "true"}}
    small = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "768Mi"}}
    return with_seal(
        {
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "config": {
                "siteUrl": f"http://{PORTAL_HOST}:{WEB_PORT}",
                "allowedHosts": [PORTAL_HOST],
                "csrfTrustedOrigins": [f"http://{PORTAL_HOST}:{WEB_PORT}"],
                "secureCookies": False,  # plain HTTP between the browser and the pods
                "behindTlsProxy": False,
                "kubeNamespacePrefix": prefix,
            },
            "extraEnv": {"KUBERNETES_SERVICE_HOST": gateway, "KUBERNETES_SERVICE_PORT": str(api_port)},
            "rbac": {"admissionWebhook": "never"},
            "postgresql": {"enabled": False},
            "externalDatabase": {"url": database_url},
            "redis": {"enabled": False},
            "externalRedis": {"url": redis_url},
            "web": {"replicas": 1, "gunicornWorkers": 1, "resources": small, **on_real_nodes},
            "proxy": {"replicas": 1, "origin": f"http://{APPS_HOST}:{PROXY_PORT}", "resources": small,
                      **on_real_nodes},
            "worker": {"concurrency": 1, "resources": small, **on_real_nodes},
            **{c: {"resources": small, **on_real_nodes} for c in ("beat", "tracker", "provisioner")},
            "migrations": {"resources": small, **on_real_nodes},
            "seed": {
                "resources": small,
                **on_real_nodes,
                "gpuTypes": seed["gpu_types"],
                "teams": [{"name": "Chart team", "slug": TEAM}],
                "defaultQuotas": seed["default_quotas"],
                "images": [i for i in seed["images"] if i["title"].startswith("JupyterLab")],
                "allowedRegistries": seed["allowed_registries"],
            },
            # Our real nodes carry no nvidia.com/gpu.present label (no GPU feature discovery): null drops the
            # default's key, and the agent samples simulated GPUs, labelled so, for want of NVML.
            "agent": {"enabled": True, "simulate": True,
                      "nodeSelector": {"nvidia.com/gpu.present": None, REAL_LABEL: "true"}},
        }
    )  # fmt: skip


@contextlib.contextmanager
def chart_database(admin_url: str) -> Iterator[str]:
    """A database of its own for the release on the session's PostgreSQL; dropped afterwards."""
    import psycopg

    name = f"chart_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with contextlib.suppress(Exception), psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_for(what: str, check, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(2)


@pytest.fixture(scope="module")
def installed(kube_cluster, kube_api, real_nodes) -> Iterator[Installed]:
    import helm_python
    from kubernetes import client

    from localcluster import images
    from localcluster.hostrelay import HostRelays

    started = time.monotonic()
    paths = images.ensure(["portal", "jupyterlab"], progress=log)
    with concurrent.futures.ThreadPoolExecutor() as pool:  # both nodes' containerd at once
        list(pool.map(lambda spec: real_nodes.import_image(spec, paths["portal"]), real_nodes.specs))
    log(f"portal image ready and imported in {time.monotonic() - started:.0f} s")

    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    gateway = real_nodes.network.gateway
    db = urllib.parse.urlsplit(os.environ["DATABASE_URL"])
    redis = urllib.parse.urlsplit(os.environ["REDIS_URL"])
    api = urllib.parse.urlsplit(kube_cluster.server)
    suffix = uuid.uuid4().hex[:4]
    namespace, name, prefix = f"t-chartreal-{suffix}", f"gpr{suffix}", f"gpc{suffix}-"
    with HostRelays(gateway) as relays, chart_database(os.environ["DATABASE_URL"]) as database:
        db_port = relays.tcp((db.hostname, db.port))
        redis_port = relays.tcp((redis.hostname, redis.port))
        api_port = relays.tls((api.hostname, api.port), pki=kube_cluster.pki)
        userinfo = db.netloc.rsplit("@", 1)[0] + "@" if "@" in db.netloc else ""
        redis_auth = redis.netloc.rsplit("@", 1)[0] + "@" if "@" in redis.netloc else ""
        values = chart_values(
            image=images.IMAGES["portal"],
            gateway=gateway,
            api_port=api_port,
            database_url=f"postgres://{userinfo}{gateway}:{db_port}/{database}",
            redis_url=f"redis://{redis_auth}{gateway}:{redis_port}/11",
            prefix=prefix,
        )
        release = Installed(namespace, name, prefix, db._replace(path=f"/{database}").geturl())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))

        def config() -> helm_python.Config:
            return helm_python.Config(kubeconfig_path=kube_cluster.kubeconfig, namespace=namespace)

        try:
            with config() as cfg:
                started = time.monotonic()
                result = cfg.install(CHART_DIR, name, values, namespace=namespace, timeout=600)
                assert result["status"] == "deployed", result
                log(f"helm install (migration and seed hooks included) took {time.monotonic() - started:.0f} s")

            def all_available() -> bool:
                deployments = apps.list_namespaced_deployment(namespace).items
                ready = {d.metadata.labels["app.kubernetes.io/component"]: d.status.available_replicas or 0
                         for d in deployments}  # fmt: skip
                agent = apps.read_namespaced_daemon_set(f"{release.fullname}-agent", namespace).status
                log(f"available: {ready}, agent {agent.number_ready}/{agent.desired_number_scheduled}")
                return (all(ready.get(c, 0) >= 1 for c in COMPONENTS) and agent.desired_number_scheduled == 2
                        and agent.number_ready == 2)  # fmt: skip

            wait_for("every Deployment and the agent DaemonSet", all_available, timeout=420)
            log(f"release running {time.monotonic() - started:.0f} s after helm install began")
            yield release
        finally:
            for pod in core.list_namespaced_pod(namespace).items:
                ready = all(s.ready for s in pod.status.container_statuses or [])
                if pod.status.phase != "Succeeded" and not (pod.status.phase == "Running" and ready):
                    with contextlib.suppress(Exception):
                        tail = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=30)
                        log(f"--- {pod.metadata.name} ({pod.status.phase}):\n{tail}")
            with contextlib.suppress(Exception), config() as cfg:
                cfg.uninstall(name, timeout=120)
            for ns in core.list_namespace().items:
                if ns.metadata.name == namespace or ns.metadata.name.startswith(prefix):
                    with contextlib.suppress(Exception):
                        core.delete_namespace(ns.metadata.name, propagation_policy="Background")
            # The portal's processes end before the database goes (its connections would hold the DROP).
            with contextlib.suppress(AssertionError):
                wait_for("the release's pods to end", lambda: not core.list_namespaced_pod(namespace).items, 120)


def pods_of(kube_api, release: Installed) -> dict[str, list[Any]]:
    from kubernetes import client

    by_component: dict[str, list[Any]] = {}
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(
        release.namespace, label_selector=f"app.kubernetes.io/instance={release.name}"
    )
    for pod in pods.items:
        by_component.setdefault(pod.metadata.labels.get("app.kubernetes.io/component", "?"), []).append(pod)
    return by_component


def test_every_portal_process_runs_as_a_pod_on_the_real_nodes_and_the_hooks_migrated(
    kube_api, installed, real_nodes
) -> None:
    from kubernetes import client

    pods = pods_of(kube_api, installed)
    for component in (*COMPONENTS, "agent"):
        running = [p for p in pods.get(component, []) if p.status.phase == "Running"]
        assert running, f"no running {component} pod: {[p.status.phase for p in pods.get(component, [])]}"
        for pod in running:
            assert pod.spec.node_name in real_nodes.names, (component, pod.spec.node_name)
            # Really started by containerd from the image built here, not a simulated status.
            [status] = pod.status.container_statuses
            assert status.container_id.startswith("containerd://"), status.container_id
    assert {p.spec.node_name for p in pods["agent"]} == set(real_nodes.names)
    batch = client.BatchV1Api(kube_api)
    for job in ("migrate", "seed"):
        stored = batch.read_namespaced_job(f"{installed.fullname}-{job}", installed.namespace)
        assert stored.status.succeeded == 1, job
    # The migration Job's own output, from the container's log on the real node.
    [migrate_pod] = [p for p in pods.get("migrate", []) if p.status.phase == "Succeeded"][:1]
    output = client.CoreV1Api(kube_api).read_namespaced_pod_log(migrate_pod.metadata.name, installed.namespace)
    # A fresh database: the hook applied every migration, the first among them.
    assert "Applying jobs.0001_initial... OK" in output, output[-2000:]
    # The agent on each node, scraped on its pod's address: simulated GPUs (no NVML here), and saying so.
    for pod in pods["agent"]:
        url = f"http://{pod.status.pod_ip}:9400/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            metrics = response.read().decode()
        assert 'simulated="true"' in metrics, metrics[:2000]
        gpus = [line for line in metrics.splitlines() if line.startswith("gpuportal_gpu_memory_total_bytes{")]
        assert len(gpus) == 4, metrics  # SIMULATE_GPUS' default
        assert all(f'node="{pod.spec.node_name}"' in line for line in gpus), gpus


def create_member(release: Installed) -> None:
    """As an admin would (`manage.py shell` against the release's database): a user in the seeded team."""
    code = (
        "from django.contrib.auth.models import User; from jobs.models import Team; "
        "from identity.models import Membership; "
        f"u = User.objects.create_user({USER!r}, password={PASSWORD!r}); "
        f"Membership.objects.create(user=u, team=Team.objects.get(slug={TEAM!r}))"
    )
    env = {**os.environ, "DATABASE_URL": release.database_url}
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=REPO_ROOT, env=env, check=True, timeout=120)


def test_sign_in_launch_and_open_a_notebook_through_the_charts_web_and_proxy(kube_api, installed, chromium) -> None:
    from playwright.sync_api import expect

    pods = pods_of(kube_api, installed)
    web, proxy = (next(p.status.pod_ip for p in pods[c] if p.status.phase == "Running") for c in ("web", "proxy"))
    create_member(installed)
    rules = f"MAP {PORTAL_HOST} {web},MAP {APPS_HOST} {proxy}"
    args = [f"--host-resolver-rules={rules}", *[a for a in CHROMIUM_ARGS if not a.startswith("--host-resolver")]]
    # A second chromium (its own host rules) from the suite's one Playwright session (tests/browser.py):
    # a second sync_playwright() cannot start while the session's runs its event loop in this thread.
    browser = chromium.browser_type.launch(executable_path=CHROMIUM, args=args)
    try:
        context = browser.new_context(
            base_url=f"http://{PORTAL_HOST}:{WEB_PORT}", viewport={"width": 1280, "height": 900}
        )
        context.set_default_timeout(30_000)
        page = context.new_page()
        page.goto("/")
        page.get_by_label("Username").fill(USER)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"http://{PORTAL_HOST}:{WEB_PORT}/")

        # The chart's beat has the worker read the cluster's nodes once a minute: until it has, the form has no
        # GPUs of the real nodes' types to offer (and says so); a user would wait for "4 of 4 free" as well.
        deadline = time.monotonic() + 240
        while True:
            page.goto("/launch/")
            if "4 of 4 free" in page.locator('option[value="real-p100"]').inner_text():
                break
            assert time.monotonic() < deadline, page.locator('option[value="real-p100"]').inner_text()
            page.wait_for_timeout(5000)
        page.get_by_label("Image", exact=True).select_option(label="JupyterLab (local)")
        page.get_by_label("Service").check()
        page.get_by_label("Name", exact=True).fill("chart-lab")
        page.get_by_label("GPU type").select_option("real-p100")
        page.get_by_label("GPUs", exact=True).fill("1")
        page.get_by_label("Time limit", exact=True).fill("10")
        page.get_by_label("Time limit unit").select_option("minutes")
        page.get_by_role("button", name="Launch", exact=True).click()
        page.wait_for_load_state()
        errors = page.locator(".errorlist, .field-error, [role=alert]").all_inner_texts()
        assert "/launch/" not in page.url, f"the launch form refused: {errors}"
        # Admitted by the chart's worker, created in the team namespace the chart's provisioner made, seen
        # running by the chart's tracker: the page follows it.
        expect(page.locator("#live")).to_have_attribute("data-state", "RUNNING", timeout=240_000)

        with context.expect_page() as opened:
            page.get_by_role("link", name="Open", exact=True).click()
        jupyter = opened.value
        deadline = time.monotonic() + 180
        while not jupyter.locator(".jp-Launcher").is_visible():
            assert time.monotonic() < deadline, f"JupyterLab did not load within 180 s: {jupyter.url}"
            if jupyter.get_by_role("heading", name="chart-lab cannot be reached").is_visible():
                jupyter.wait_for_timeout(2000)
                jupyter.reload(timeout=30_000)
            else:
                jupyter.wait_for_timeout(500)
        # On the apps' origin, served by the chart's proxy pod, handed over by the portal with a ticket.
        assert jupyter.url.startswith(f"http://{APPS_HOST}:{PROXY_PORT}/w/"), jupyter.url

        # Open lands in the home workspace (/home/user): the notebook is made there, with no folder to find.
        jupyter.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
        editor = jupyter.locator(".jp-Notebook .jp-Cell .cm-content").first
        expect(editor).to_be_visible()
        expect(jupyter.get_by_role("button", name="Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)
        editor.fill("import os; print('gpus', os.environ['NVIDIA_VISIBLE_DEVICES'], 6 * 7, 'in', os.getcwd())")
        editor.press("Shift+Enter")
        output = jupyter.locator(".jp-OutputArea-output").first
        expect(output).to_contain_text("gpus GPU-", timeout=120_000)
        expect(output).to_contain_text(" 42 in /home/user")
        with contextlib.suppress(Exception):
            (REPO_ROOT / "test-output").mkdir(exist_ok=True)
            jupyter.screenshot(path=str(REPO_ROOT / "test-output" / "chart_real_jupyterlab.png"))
        context.close()
    finally:
        browser.close()
