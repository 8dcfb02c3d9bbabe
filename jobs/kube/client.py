"""The one place that loads Kubernetes credentials and classifies API errors.

In a pod the service account is used; elsewhere the kubeconfig named by settings.KUBECONFIG (or the
client's default). Clients are built once per process (Celery forks, so per pid) and reused.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

_lock = threading.Lock()
_clients: dict[int, client.ApiClient] = {}


class KubeConfigError(RuntimeError):
    """The portal has no usable credentials for a cluster."""


def api_client() -> client.ApiClient:
    pid = os.getpid()
    cached = _clients.get(pid)
    if cached is not None:
        return cached
    with _lock:
        if pid not in _clients:
            _clients.clear()  # anything from the parent process is not ours to use
            _clients[pid] = _load()
        return _clients[pid]


def _load() -> client.ApiClient:
    configuration = client.Configuration()
    try:
        if not settings.KUBECONFIG and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=settings.KUBECONFIG or None,
                context=settings.KUBE_CONTEXT or None,
                client_configuration=configuration,
            )
    except (ConfigException, OSError, TypeError) as exc:
        where = settings.KUBECONFIG or "the default kubeconfig"
        raise KubeConfigError(f"cannot load Kubernetes credentials from {where}: {exc}") from exc
    # Fail fast and let our own retry policy (Celery backoff, tracker loop) decide what happens next.
    configuration.retries = urllib3.Retry(total=1, connect=1, read=0, backoff_factor=0.2)
    configuration.connection_pool_maxsize = 16
    return client.ApiClient(configuration)


def reset() -> None:
    """Forget loaded clients (after the kubeconfig changes, e.g. in tests)."""
    with _lock:
        for api in _clients.values():
            api.close()
        _clients.clear()


def core() -> client.CoreV1Api:
    return client.CoreV1Api(api_client())


def batch() -> client.BatchV1Api:
    return client.BatchV1Api(api_client())


def apps() -> client.AppsV1Api:
    return client.AppsV1Api(api_client())


def networking() -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api_client())


def rbac() -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(api_client())


# EndpointSlices: discovery.k8s.io/v1 since Kubernetes 1.21, v1beta1 before (the local cluster runs 1.20).
_DISCOVERY_VERSIONS = ("v1", "v1beta1")
_discovery_version: list[str] = []


def ready_endpoint(
    namespace: str, service: str, *, port_name: str = "http", api: client.ApiClient | None = None
) -> tuple[str, int] | None:
    """A ready pod's (IP, port) behind a Service, from its EndpointSlices; None when none is ready.

    The portal's proxy dials this address directly, so it works with or without kube-proxy and cluster DNS.
    `api`: a client with other credentials (the proxy's own identity) instead of the portal's.
    """
    params = {"labelSelector": f"kubernetes.io/service-name={service}"}
    versions = _discovery_version or list(_DISCOVERY_VERSIONS)
    for version in versions:
        path = f"/apis/discovery.k8s.io/{version}/namespaces/{namespace}/endpointslices"
        client_ = api or api_client()
        request = client_.param_serialize(
            "GET", path, query_params=list(params.items()), header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )  # fmt: skip
        response = client_.call_api(*request, _request_timeout=timeout())
        data = response.read()
        if response.status == 404 and not _discovery_version:
            continue  # this API version is not served here: try the older one
        if response.status >= 400:
            error = ApiException(status=response.status, reason=response.reason)
            error.body = data.decode("utf-8", "replace")
            raise error
        body = json.loads(data)
        if not _discovery_version:
            _discovery_version.append(version)
        return _first_ready(body.get("items") or [], port_name)
    return None


def _slice_port(item: dict, port_name: str) -> int | None:
    """The EndpointSlice's port named `port_name`, else its first."""
    ports = item.get("ports") or []
    port = next((p.get("port") for p in ports if p.get("name") == port_name), None)
    return port or (ports[0].get("port") if ports else None)


def _first_ready(slices: list[dict], port_name: str) -> tuple[str, int] | None:
    for item in slices:
        port = _slice_port(item, port_name)
        for endpoint in item.get("endpoints") or []:
            ready = (endpoint.get("conditions") or {}).get("ready")
            addresses = endpoint.get("addresses") or []
            if port and addresses and ready is not False:  # unset means ready (the API's own rule)
                return addresses[0], int(port)
    return None


def stream_get(path: str, params: dict[str, str], *, read_timeout: float):
    """A streaming GET (watches, followed logs) through the same connection pool and credentials.

    Returns the urllib3 response with its body unread; raises ApiException on an HTTP error.
    """
    from urllib.parse import urlencode

    api = api_client()
    headers = _headers(api, Accept="application/json")
    url = f"{api.configuration.host}{path}?{urlencode(params)}"
    response = api.rest_client.pool_manager.request(
        "GET",
        url,
        headers=headers,
        preload_content=False,
        timeout=urllib3.Timeout(connect=timeout(), read=read_timeout),
        retries=False,
    )
    if response.status >= 400:
        body = response.read()
        response.release_conn()
        error = ApiException(status=response.status, reason=response.reason)
        error.body = body.decode("utf-8", "replace")
        raise error
    return response


# Where each kind of a workload's objects is created (the API's own paths, as the client's methods use).
CREATE_PATHS = {
    "Job": "/apis/batch/v1/namespaces/{namespace}/jobs",
    "Deployment": "/apis/apps/v1/namespaces/{namespace}/deployments",
    "Service": "/api/v1/namespaces/{namespace}/services",
    "Secret": "/api/v1/namespaces/{namespace}/secrets",
}


def _headers(api: client.ApiClient, **extra: str) -> dict[str, str]:
    """The client's own headers (user agent) and credentials (a refreshed token, if the kubeconfig has one)."""
    configuration = api.configuration
    headers = {**api.default_headers, **extra}
    token = configuration.get_api_key_with_prefix("authorization") or configuration.get_api_key_with_prefix(
        "BearerToken"
    )
    if token:
        headers["Authorization"] = token
    return headers


def create(namespace: str, body: dict[str, Any]) -> None:
    """Create one object from its rendered dict (objects.make_objects) in `namespace`: the POST the
    client's create_namespaced_* sends, through the same connection pool, credentials and retries, without
    its per-call argument validation (which rebuilds the whole object as client models from the dict, then
    serializes them back) and without decoding the answer. Raises ApiException as the client does (status,
    reason, the API server's Status as its body)."""
    _send("POST", CREATE_PATHS[body["kind"]].format(namespace=quote(namespace, safe="")), body)


def delete(kind: str, namespace: str, name: str, body: dict[str, Any] | None = None) -> None:
    """Delete one Job, Deployment or Service by name, its answer read but not decoded. The client's
    delete_namespaced_* decode the answer into the type the newest API servers send back (for a Service,
    the Service), and fail on what older ones send (a Status, as Kubernetes 1.20 does): after the object
    is gone. Raises ApiException as the client does; 404 included, for the caller to judge."""
    path = CREATE_PATHS[kind].format(namespace=quote(namespace, safe="")) + "/" + quote(name, safe="")
    _send("DELETE", path, body)


def _send(method: str, path: str, body: dict[str, Any] | None) -> None:
    """One request with a JSON body through the client's pool and credentials; the answer is read and
    dropped. A status outside 2xx raises ApiException (status, reason, the answer as its body)."""
    api = api_client()
    response = api.rest_client.pool_manager.request(
        method,
        api.configuration.host + path,
        body=json.dumps(body) if body is not None else None,
        headers=_headers(api, Accept="application/json", **{"Content-Type": "application/json"}),
        timeout=urllib3.Timeout(total=timeout()),
        preload_content=False,
    )
    try:
        answer = response.read()
    finally:
        response.release_conn()
    if not 200 <= response.status <= 299:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = answer.decode("utf-8", "replace")
        raise error


def timeout() -> float:
    return float(settings.KUBE_REQUEST_TIMEOUT)


def to_dict(obj: Any) -> Any:
    return api_client().sanitize_for_serialization(obj)


@dataclass(frozen=True)
class ApiFailure:
    """What an exception from a Kubernetes call means for the caller."""

    status: int | None
    transient: bool
    message: str


def classify(exc: BaseException) -> ApiFailure:
    """Transient failures (server down, overloaded, timeouts) are retried; the rest are the request's fault."""
    if isinstance(exc, ApiException):
        status = exc.status or None
        message = _api_message(exc)
        transient = status is None or status == 429 or status >= 500
        return ApiFailure(status=status, transient=transient, message=message)
    if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError | OSError):
        return ApiFailure(status=None, transient=True, message=f"Kubernetes API unreachable: {exc.__class__.__name__}")
    return ApiFailure(status=None, transient=False, message=str(exc))


PREPARING_TEAM_SPACE = "The portal is still preparing your team's space in the cluster"


def user_words(exc: BaseException) -> str:
    """What a person may read about a failed Kubernetes call: words, never the API server's own text
    (which names service accounts, verbs and resources, and means nothing to a researcher). The raw
    message belongs in the log. One place for the web, the API, timelines and reasons alike."""
    failure = classify(exc)
    status = failure.status
    if status == 403:
        return PREPARING_TEAM_SPACE  # a new namespace's permissions not in effect yet (or not granted)
    if status == 404:
        return "Your team's space in the cluster is not ready yet"
    if status == 401:
        return "The cluster did not accept the portal's credentials; an admin must look at it"
    if status == 409:
        return "Something of the same name already exists in the cluster"
    if status in (400, 422):
        return "The cluster refused the request as invalid; an admin can see why in the portal's log"
    if failure.transient:
        return "The cluster is busy or cannot be reached right now"
    return f"The cluster refused the request (HTTP {status}); an admin can see why in the portal's log"


def _api_message(exc: ApiException) -> str:
    import json

    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason or exc.status)
    except (ValueError, TypeError):
        return str(exc.reason or exc.status)


def is_status(exc: BaseException, status: int) -> bool:
    return isinstance(exc, ApiException) and exc.status == status
