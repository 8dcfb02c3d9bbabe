"""GPU Portal settings.

Every value that differs between a laptop, CI and a cluster comes from the environment, read here and
nowhere else (helpers in portal/env.py). With nothing set, the portal runs in DEBUG on SQLite against a
local Redis; production sets DEBUG=0 and must then give SECRET_KEY (or SECRET_KEY_FILE).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from portal.env import (
    ConfigError,
    env_bool,
    env_database,
    env_dict,
    env_email,
    env_int,
    env_list,
    env_networks,
    env_str,
)
from portal.sealing import env_seal_keys

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PORTAL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", default=False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ConfigError("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off")
    SECRET_KEY = "insecure-development-key-do-not-use-in-production"  # noqa: S105

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
# A refused form gets the portal's own page with a way back, not Django's bare "CSRF verification failed".
CSRF_FAILURE_VIEW = "jobs.views.errors.csrf_failure"
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000")

INSTALLED_APPS = [
    "portal.admin_site.PortalAdminConfig",  # django.contrib.admin, its bulk actions safe against a bad selection
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "django_htmx",
    "drf_spectacular_sidecar",
    "axes",
    "jobs",
    "api",
    "telemetry",
    "notifications",
    "identity",
]

MIDDLEWARE = [
    "portal.security.TrustedProxyMiddleware",
    "portal.security.NulQueryMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "portal.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.htmx.SignedOutPartialMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into a 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "jobs.context_processors.acting",
                "identity.context.sign_in",
            ],
        },
    },
]

# --- database ------------------------------------------------------------------------------------
DATABASES = {"default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and tracker share the file in development: take the write lock up front and wait for
    # it instead of failing with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Django's backend with a health check that asks the connection's socket instead of sending `SELECT 1`
    # before every request's and every task's first query (portal/postgresql/base.py).
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"]["ENGINE"] = "portal.postgresql"
    # Parameters bound by the server and, once a statement has run DATABASE_PREPARE_THRESHOLD times on a
    # connection, prepared there (psycopg names and caches it): PostgreSQL then parses it once per connection
    # and, after five custom plans, keeps a generic plan instead of planning every call; planning was two
    # thirds of its planning and execution time on a workload's path (issue 41; benchmarks/README.md). Behind a pooler in transaction mode that does not keep prepared
    # statements (PgBouncer before 1.21, or without max_prepared_statements) set DATABASE_PREPARED_STATEMENTS=0.
    # The threshold is at least 1: a string of several commands (a migration's SQL) cannot be prepared, and
    # none is sent twice on one connection.
    if env_bool("DATABASE_PREPARED_STATEMENTS", True):
        DATABASES["default"].setdefault("OPTIONS", {}).update(
            {"server_side_binding": True, "prepare_threshold": env_int("DATABASE_PREPARE_THRESHOLD", 5, minimum=1)}
        )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# With DEBUG off the portal is served over HTTPS: cookies only over HTTPS, and browsers told to come back
# only over HTTPS (HSTS). SECURE_COOKIES=0 is the one opt-out, for plain-HTTP trials; it turns HSTS off
# too, since HSTS on a site without TLS would lock browsers out of it.
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int(
    "HSTS_SECONDS", 365 * 86400 if SESSION_COOKIE_SECURE and not DEBUG else 0, minimum=0
)  # fmt: skip
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("HSTS_PRELOAD", default=True)
# HTTP -> HTTPS: behind a TLS-terminating proxy (the chart's ingress) the proxy redirects; the portal does
# it itself only when told (SSL_REDIRECT=1), since it sees plain HTTP from the proxy and from probes.
SECURE_SSL_REDIRECT = env_bool("SSL_REDIRECT", default=False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
# Addresses or networks of the reverse proxies in front of the portal (ingress controller, load balancer):
# only their X-Forwarded-Proto/-For are believed (portal/security.py drops them from anyone else).
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")
# The same for the service proxy (proxy/): whose X-Forwarded-For it extends instead of replacing. Empty: the
# proxy writes the address that connected (one entry: make run, compose); the chart sets trustedProxies here.
PROXY_TRUSTED_PROXIES = env_networks("PROXY_TRUSTED_PROXIES")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("BEHIND_TLS_PROXY") else None
# check --deploy asks for SECURE_SSL_REDIRECT; behind a TLS proxy that redirect is the proxy's (above).
SILENCED_SYSTEM_CHECKS = ["security.W008"] if SECURE_PROXY_SSL_HEADER and not SECURE_SSL_REDIRECT else []
# Scripts and styles are static files of this site: no inline script, no inline style (bars are SVG with
# width attributes; scripts set styles through the CSSOM, which the policy allows).
CONTENT_SECURITY_POLICY = env_str(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'",
)

# --- sign-in throttling (django-axes) ---
# Failed sign-ins on /login/ and /admin/ are counted per pair of username and client address (the address
# as TRUSTED_PROXIES let the portal know it: portal/security.py); at the limit further attempts of that pair
# are refused (429) until the cool-off has passed. A pair, so that nobody can lock another person (or
# everyone behind one proxy) out by failing on purpose.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_int("LOGIN_COOLOFF_MINUTES", 15, minimum=1) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "portal.security.axes_client_ip"
AXES_USERNAME_CALLABLE = "portal.security.axes_username"
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
X_FRAME_OPTIONS = "DENY"

# --- outgoing e-mail ---------------------------------------------------------------------------------
# One URL says where mail goes: EMAIL_URL (or EMAIL_URL_FILE, a mounted Secret, since it may hold the
# password), e.g. smtp+tls://user:password@mail.example.org:587?from=gpus@example.org. Unset, mail is
# written to the log (console://), so a deployment that forgot it loses nothing silently.
_EMAIL = env_email("EMAIL_URL", "console://")
EMAIL_BACKEND = _EMAIL["EMAIL_BACKEND"]
EMAIL_TIMEOUT = _EMAIL["EMAIL_TIMEOUT"]  # a slow mail server never holds a worker for long
EMAIL_HOST = _EMAIL.get("EMAIL_HOST", "localhost")
EMAIL_PORT = _EMAIL.get("EMAIL_PORT", 25)
EMAIL_HOST_USER = _EMAIL.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = _EMAIL.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = _EMAIL.get("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = _EMAIL.get("EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = (
    env_str("DEFAULT_FROM_EMAIL") or _EMAIL.get("DEFAULT_FROM_EMAIL") or "GPU Portal <noreply@localhost>"
)
SERVER_EMAIL = DEFAULT_FROM_EMAIL

# --- sign-in through the institution's identity provider (identity/) ----------------------------------
# OpenID Connect, configured by the issuer URL (discovery) and a confidential client. Unset: password
# sign-in only (as `make run` does).
OIDC_ISSUER = env_str("OIDC_ISSUER")
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID")
OIDC_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET")  # or OIDC_CLIENT_SECRET_FILE (a mounted Secret)
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "your institution")
OIDC_SCOPES = env_list("OIDC_SCOPES", ["openid", "email", "profile"])
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_EMAIL_CLAIM = env_str("OIDC_EMAIL_CLAIM", "email")
# Also ask the userinfo endpoint for claims (groups are often only there).
OIDC_USERINFO = env_bool("OIDC_USERINFO", default=True)
# Show the password form beside the provider's button. Off: the button only (administrators can still
# reach the form at /login/?password=1 and /admin/).
OIDC_PASSWORD_LOGIN = env_bool("OIDC_PASSWORD_LOGIN", default=True)
OIDC_END_PROVIDER_SESSION = env_bool("OIDC_END_PROVIDER_SESSION", default=True)
if OIDC_ISSUER and not OIDC_ISSUER.startswith(("https://", "http://")):
    raise ConfigError(f"OIDC_ISSUER={OIDC_ISSUER!r} is not an http(s) URL")
if OIDC_ISSUER and not OIDC_CLIENT_ID:
    raise ConfigError("OIDC_ISSUER is set but OIDC_CLIENT_ID is not")

# --- Kubernetes ------------------------------------------------------------------------------------
# In a pod, the in-cluster service account is used; otherwise KUBECONFIG (a path) is read.
KUBECONFIG = env_str("KUBECONFIG")
KUBE_CONTEXT = env_str("KUBE_CONTEXT")
KUBE_REQUEST_TIMEOUT = env_int("KUBE_REQUEST_TIMEOUT", 15, minimum=1)
KUBE_NAMESPACE_PREFIX = env_str("KUBE_NAMESPACE_PREFIX", "gpuportal-")
# The ClusterRoles the provisioner binds in each team namespace (helm/files/rbac-rules.yaml, "workloads"
# and "reader"), and the service accounts ("namespace/name") it binds them to: the engine's (worker,
# tracker) and the web's. An empty account: bind nothing (the credentials in use can already write
# everywhere, as with an admin kubeconfig in development).
KUBE_WORKLOADS_CLUSTERROLE = env_str("KUBE_WORKLOADS_CLUSTERROLE", "gpuportal-workloads")
KUBE_SERVICE_ACCOUNT = env_str("KUBE_SERVICE_ACCOUNT")
KUBE_READER_CLUSTERROLE = env_str("KUBE_READER_CLUSTERROLE", "gpuportal-reader")
KUBE_WEB_SERVICE_ACCOUNT = env_str("KUBE_WEB_SERVICE_ACCOUNT")
# The service proxy's account and the role the provisioner binds to it in each team namespace (reading
# services and EndpointSlices there, nowhere else); empty account: no binding.
KUBE_PROXY_CLUSTERROLE = env_str("KUBE_PROXY_CLUSTERROLE", "gpuportal-proxy")
KUBE_PROXY_SERVICE_ACCOUNT = env_str("KUBE_PROXY_SERVICE_ACCOUNT")
# The Celery queue only the provisioner consumes (it alone may create team namespaces and bindings).
PROVISION_QUEUE = env_str("PROVISION_QUEUE", "provision")
# Team namespaces' NetworkPolicy: CIDRs user pods may reach (empty: anything outside the blocked ones),
# and CIDRs they may never reach (cloud metadata, the cluster's pod and service ranges).
TEAM_EGRESS_ALLOW_CIDRS = env_list("TEAM_EGRESS_ALLOW_CIDRS", ["0.0.0.0/0"])
TEAM_EGRESS_DENY_CIDRS = env_list(
    "TEAM_EGRESS_DENY_CIDRS", ["169.254.169.254/32", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]
)
# The labels of the portal's proxy pods (they alone, besides the namespace itself, reach user pods), and
# the label of the portal's own namespace, e.g. kubernetes.io/metadata.name=gpuportal (empty: any namespace).
TEAM_INGRESS_PROXY_LABELS = env_dict("TEAM_INGRESS_PROXY_LABELS", {"app.kubernetes.io/component": "proxy"})
TEAM_INGRESS_PORTAL_NAMESPACE_LABELS = env_dict("TEAM_INGRESS_PORTAL_NAMESPACE_LABELS", {})
# Ephemeral storage every user container may write (its /tmp, home and logs), per pod.
TEAM_EPHEMERAL_STORAGE_DEFAULT = env_str("TEAM_EPHEMERAL_STORAGE_DEFAULT", "20Gi")

# --- workspaces ------------------------------------------------------------------------------------
# Persistent volumes every workload mounts: the owner's home at /home/<username> and the team's shared
# space at /team, PersistentVolumeClaims in the team namespace from this StorageClass, created on first
# use and never deleted by the portal (only by an admin's explicit action). Empty: no workspaces.
# The local cluster's class is `gpuportal-local` (`make run` sets it). Sizes per team in Django admin;
# these are the defaults.
WORKSPACE_STORAGE_CLASS = env_str("WORKSPACE_STORAGE_CLASS")
WORKSPACE_HOME_GIB = env_int("WORKSPACE_HOME_GIB", 10, minimum=1)
WORKSPACE_TEAM_GIB = env_int("WORKSPACE_TEAM_GIB", 50, minimum=1)

# --- sealed values (portal/sealing.py) ------------------------------------------------------------
# Users' secrets and registry passwords are sealed to the engine's public key: the web (and admin, and the
# migration that seals old rows) needs PORTAL_SEAL_PUBLIC_KEY; only the worker gets PORTAL_SEAL_PRIVATE_KEY
# (or _FILE, a mounted Secret), opens them and writes the Kubernetes Secrets. `manage.py seal_keypair`.
PORTAL_SEAL_PUBLIC_KEY, PORTAL_SEAL_PRIVATE_KEY = env_seal_keys()
# Storing a secret waits this long for the engine to confirm it is written (then answers "pending"); the
# first secret of a new team waits for its namespace too.
PORTAL_SECRET_CONFIRM_SECONDS = env_int("PORTAL_SECRET_CONFIRM_SECONDS", 20, minimum=0, maximum=60)
# A launch that needs a secret the engine has not confirmed within this long fails, saying so.
PORTAL_SECRET_WRITE_TIMEOUT = env_int("PORTAL_SECRET_WRITE_TIMEOUT", 300, minimum=10)

# --- the workload engine ---------------------------------------------------------------------------
# Objects this installation manages carry this label value, so two portals (or test runs) can share a
# cluster without touching each other's workloads.
PORTAL_INSTANCE = env_str("PORTAL_INSTANCE", "default")
PORTAL_DEFAULT_TIME_LIMIT_BATCH = env_int("PORTAL_DEFAULT_TIME_LIMIT_BATCH", 24 * 3600, minimum=60)
PORTAL_DEFAULT_TIME_LIMIT_SERVICE = env_int("PORTAL_DEFAULT_TIME_LIMIT_SERVICE", 8 * 3600, minimum=60)
PORTAL_MIN_TIME_LIMIT = env_int("PORTAL_MIN_TIME_LIMIT", 60, minimum=1)
# How many workloads may wait in the queue at once, per person and per team (the quota decides what runs).
PORTAL_MAX_QUEUED_PER_USER = env_int("PORTAL_MAX_QUEUED_PER_USER", 500, minimum=1)
PORTAL_MAX_QUEUED_PER_TEAM = env_int("PORTAL_MAX_QUEUED_PER_TEAM", 5000, minimum=1)
PORTAL_MAX_TIME_LIMIT = env_int("PORTAL_MAX_TIME_LIMIT", 7 * 24 * 3600, minimum=60)
# A pod that cannot pull its image fails after this long (it would otherwise hold quota forever).
PORTAL_IMAGE_PULL_TIMEOUT = env_int("PORTAL_IMAGE_PULL_TIMEOUT", 300, minimum=1)
# Finished workloads' Kubernetes objects are deleted this long after their final state is recorded.
PORTAL_RETENTION_SECONDS = env_int("PORTAL_RETENTION_SECONDS", 3600, minimum=0)
# A workload admitted this long ago whose objects were never created is handed to a worker again.
PORTAL_STUCK_SUBMIT_SECONDS = env_int("PORTAL_STUCK_SUBMIT_SECONDS", 30, minimum=1)
PORTAL_RESYNC_SECONDS = env_int("PORTAL_RESYNC_SECONDS", 30, minimum=1)
PORTAL_SWEEP_SECONDS = env_int("PORTAL_SWEEP_SECONDS", 15, minimum=1)
PORTAL_LIMITS_SECONDS = env_int("PORTAL_LIMITS_SECONDS", 10, minimum=1)
# Preempting a borrowed workload: SIGTERM, then this many seconds before the kill.
PORTAL_PREEMPT_GRACE_SECONDS = env_int("PORTAL_PREEMPT_GRACE_SECONDS", 20, minimum=0)
# The portal's API as a workload's pod reaches it (GPUPORTAL_API_URL, for `gpuportal checkpoint` inside the
# container). Empty: not given to pods. The local cluster's real nodes reach the host through their bridge's
# gateway (devtools/run.py sets it to http://<gateway>:<web port>); a real cluster's is the portal's own URL.
PORTAL_POD_API_URL = env_str("PORTAL_POD_API_URL", "")
# Automatic retry of restartable batch jobs after an end that is not their fault: backoff before attempt
# n+1 is BASE x 2^(retries so far), at most MAX.
PORTAL_RETRY_BACKOFF_SECONDS = env_int("PORTAL_RETRY_BACKOFF_SECONDS", 30, minimum=0)
PORTAL_RETRY_BACKOFF_MAX_SECONDS = env_int("PORTAL_RETRY_BACKOFF_MAX_SECONDS", 900, minimum=0)
# GPU health: healthy agent reports in a row that close a node's open health mark by themselves.
PORTAL_GPU_HEALTHY_REPORTS_TO_CLEAR = env_int("PORTAL_GPU_HEALTHY_REPORTS_TO_CLEAR", 10, minimum=1)
# Gang jobs (several nodes): if not every rank runs within this window after its objects are made, all of
# them are deleted and the gang goes back to the front of its queue (no GPUs held partly placed).
GANG_START_WINDOW_SECONDS = env_int("GANG_START_WINDOW_SECONDS", 300, minimum=10)
GANG_SWEEP_SECONDS = env_int("GANG_SWEEP_SECONDS", 10, minimum=1)
GANG_MASTER_PORT = env_int("GANG_MASTER_PORT", 29500, minimum=1024)
# A node label that groups nodes (a zone, a rack); a gang may ask that all its ranks share one value of it.
GANG_TOPOLOGY_LABEL = env_str("GANG_TOPOLOGY_LABEL", "")
# Whether the cluster resolves pod names (cluster DNS): then rank 0 is reached by a stable name under a
# headless Service; without it, the portal hands rank 0's pod IP to the other ranks.
CLUSTER_DNS = env_bool("CLUSTER_DNS", False)
# Every queued workload's estimated start is refreshed at least this often (and after each admission).
PORTAL_ESTIMATE_SECONDS = env_int("PORTAL_ESTIMATE_SECONDS", 30, minimum=1)
# Fair-share and estimates look this far back into each user's history.
PORTAL_HISTORY_DAYS = env_int("PORTAL_HISTORY_DAYS", 14, minimum=1)

# --- GPU telemetry (node agents' reports) --------------------------------------------------------------
# Per-workload GPU minutes older than this are deleted by the hourly prune task.
TELEMETRY_RETENTION_DAYS = env_int("TELEMETRY_RETENTION_DAYS", 30, minimum=1)
# The largest report body accepted (an 8-GPU report is about 5 KB).
TELEMETRY_MAX_REPORT_BYTES = env_int("TELEMETRY_MAX_REPORT_BYTES", 1024 * 1024, minimum=1024)
# The largest real nodes carry 8-16 GPUs; a report claiming hundreds is refused, not stored.
TELEMETRY_MAX_GPUS_PER_REPORT = env_int("TELEMETRY_MAX_GPUS_PER_REPORT", 32, minimum=1)
TELEMETRY_MAX_PROCESSES_PER_GPU = env_int("TELEMETRY_MAX_PROCESSES_PER_GPU", 128, minimum=1)
# Reports stamped further than this ahead of the portal's clock are refused (a node with a wrong clock).
TELEMETRY_MAX_CLOCK_SKEW_SECONDS = env_int("TELEMETRY_MAX_CLOCK_SKEW_SECONDS", 300, minimum=1)
TELEMETRY_IDLE_CHECK_SECONDS = env_int("TELEMETRY_IDLE_CHECK_SECONDS", 300, minimum=10)
# Agents in the cluster prove their node with their own projected service-account token (audience below),
# checked by TokenReview and mapped to the pod's node; empty AGENT_SERVICE_ACCOUNT turns that path off.
# "namespace/name" of the agent's ServiceAccount; AGENT_DAEMONSET: the DaemonSet its pods must belong to.
AGENT_SERVICE_ACCOUNT = env_str("AGENT_SERVICE_ACCOUNT")
AGENT_DAEMONSET = env_str("AGENT_DAEMONSET")
AGENT_TOKEN_AUDIENCE = env_str("AGENT_TOKEN_AUDIENCE", "gpuportal-agent")
# A reviewed token's node is remembered this long (a deleted agent pod's token works at most this much longer).
AGENT_TOKEN_REVIEW_CACHE_SECONDS = env_int("AGENT_TOKEN_REVIEW_CACHE_SECONDS", 60, minimum=0)

# --- notifications (notifications/) -----------------------------------------------------------------
# Webhooks may reach only public addresses, except networks listed here (CIDRs, comma-separated), e.g. a
# site's internal chat server; tests and `make run` list 127.0.0.0/8.
NOTIFY_WEBHOOK_ALLOWED_NETWORKS = env_list("NOTIFY_WEBHOOK_ALLOWED_NETWORKS")
for _network in NOTIFY_WEBHOOK_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as _exc:
        raise ConfigError(f"NOTIFY_WEBHOOK_ALLOWED_NETWORKS: {_network!r} is not a network (e.g. 10.0.0.0/8)") from _exc
NOTIFY_WEBHOOK_TIMEOUT_SECONDS = env_int("NOTIFY_WEBHOOK_TIMEOUT_SECONDS", 5, minimum=1, maximum=60)
NOTIFY_MAX_ATTEMPTS = env_int("NOTIFY_MAX_ATTEMPTS", 6, minimum=1, maximum=50)
NOTIFY_RETRY_BASE_SECONDS = env_int("NOTIFY_RETRY_BASE_SECONDS", 30, minimum=1)
NOTIFY_RETRY_MAX_SECONDS = env_int("NOTIFY_RETRY_MAX_SECONDS", 3600, minimum=1)
# A claimed delivery whose sender died is sent again after this long; it must exceed the longest send
# (the webhook and SMTP timeouts), or a slow send could be claimed twice.
NOTIFY_LEASE_SECONDS = env_int("NOTIFY_LEASE_SECONDS", 120, minimum=2)
NOTIFY_SWEEP_SECONDS = env_int("NOTIFY_SWEEP_SECONDS", 15, minimum=1)
# "Your workload started" only after it waited at least this long in the queue.
NOTIFY_QUEUED_MIN_SECONDS = env_int("NOTIFY_QUEUED_MIN_SECONDS", 300, minimum=0)
NOTIFY_TIME_LIMIT_WARNING_SECONDS = env_int("NOTIFY_TIME_LIMIT_WARNING_SECONDS", 900, minimum=60)

# --- Redis and Celery ----------------------------------------------------------------------------
# No default address: a portal that quietly took the machine's Redis on 6379 would share its broker with
# every other portal there, and their workers would run each other's tasks. `make run` and `make test`
# start a Redis of their own; a deployment names its own. Without one, DEBUG runs with no broker (a
# worker or beat refuses to start, saying so; the web logs that it could not hand work over) and a
# per-process cache; with DEBUG off the portal refuses to start.
REDIS_URL = env_str("REDIS_URL")
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
if not CELERY_BROKER_URL and not DEBUG:
    raise ConfigError("REDIS_URL (or CELERY_BROKER_URL) must be set: the portal's own Redis, its broker and cache")
# A name that never resolves (.invalid), so nothing can be sent there: a sender logs why (portal/celery.py).
NO_BROKER = "redis://no-broker-set.invalid:6379/0"
if not CELERY_BROKER_URL:
    CELERY_BROKER_URL = NO_BROKER
# rediss:// (TLS): kombu insists on being told how to check the server's certificate; verify it against
# the system's CAs (or REDIS_TLS_CA_FILE) unless the URL says otherwise (?ssl_cert_reqs=...).
if CELERY_BROKER_URL.startswith("rediss://") and "ssl_cert_reqs" not in CELERY_BROKER_URL:
    import ssl

    CELERY_BROKER_USE_SSL = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    if env_str("REDIS_TLS_CA_FILE"):
        CELERY_BROKER_USE_SSL["ssl_ca_certs"] = env_str("REDIS_TLS_CA_FILE")
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT = "portal.broker:Transport"  # kombu's, one redis client per pool (portal/broker.py)
CELERY_RESULT_BACKEND = None  # tasks report through the database, never through results
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_TRACK_STARTED = True
# What a task prints (the console mail backend of `make run`, say) is logged at INFO, not Celery's WARNING.
CELERY_WORKER_REDIRECT_STDOUTS_LEVEL = "INFO"
# Each task's first query would otherwise pay PostgreSQL a new backend (a fork, authentication, a cold
# catalog cache: more CPU on the one primary than most tasks' own statements, issue 41). Celery's Django
# fix-up keeps a worker's connection for this many tasks (0: a new one per task, Celery's default);
# portal/celery.py closes one that is too old (CONN_MAX_AGE), broken or in a failed transaction.
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 500, minimum=0)
CELERY_TASK_ACKS_LATE = True  # a worker killed mid-task leaves the message for the next one
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 600, "socket_connect_timeout": 3}
# A web request must not hang on a broker that is down: give up quickly (the workload is stored and
# the periodic sweep hands it to a worker once the broker is back).
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# Only the provisioner consumes this queue (it alone holds the right to create namespaces and bindings).
CELERY_TASK_ROUTES = {
    "jobs.tasks.provision_namespace": {"queue": PROVISION_QUEUE},
    "jobs.tasks.provision_existing": {"queue": PROVISION_QUEUE},
}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE = {
    # Safety nets: each also runs on the events that matter, these catch what was missed (Redis down,
    # a worker killed, a watch that dropped).
    "admission-sweep": {"task": "jobs.tasks.sweep", "schedule": float(PORTAL_SWEEP_SECONDS)},
    "enforce-limits": {"task": "jobs.tasks.enforce_limits", "schedule": float(PORTAL_LIMITS_SECONDS)},
    "start-estimates": {"task": "jobs.tasks.estimate_all", "schedule": float(PORTAL_ESTIMATE_SECONDS)},
    "cleanup": {"task": "jobs.tasks.cleanup", "schedule": 300.0},
    "gang-start-window": {"task": "jobs.tasks.gang_start_window", "schedule": float(GANG_SWEEP_SECONDS)},
    "inventory": {"task": "jobs.tasks.sync_inventory", "schedule": 60.0},
    # Costs nothing once every workspace claim is bound and mapped (no API call then).
    "workspace-volumes": {"task": "jobs.tasks.learn_workspace_volumes", "schedule": 60.0},
    "usage-rollup": {"task": "jobs.tasks.rollup_usage", "schedule": 3600.0},
    "idle-services": {"task": "telemetry.tasks.check_idle_services", "schedule": float(TELEMETRY_IDLE_CHECK_SECONDS)},
    "telemetry-prune": {"task": "telemetry.tasks.prune", "schedule": 3600.0},
    "idempotency-prune": {"task": "api.tasks.prune_idempotency_records", "schedule": 3600.0},
    "notifications-sweep": {"task": "notifications.tasks.sweep", "schedule": float(NOTIFY_SWEEP_SECONDS)},
    "time-limit-warnings": {"task": "notifications.tasks.time_limit_warnings", "schedule": 60.0},
}

# --- logging -----------------------------------------------------------------------------------------
LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "kubernetes": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "django.db.backends": {"level": "INFO"},
    },
}

# --- REST API (api/) -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.TokenRateThrottle", "api.throttling.UserRateThrottle"],
    # Per token, and per person over all their tokens and their browser session together.
    "DEFAULT_THROTTLE_RATES": {
        "token": env_str("API_THROTTLE_RATE", "600/min"),
        "user": env_str("API_USER_THROTTLE_RATE", "1200/min"),
    },
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.SafeJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "api.renderers.PortalContentNegotiation",
    "DEFAULT_SCHEMA_CLASS": "api.schema.PortalAutoSchema",
    "DEFAULT_METADATA_CLASS": None,  # no OPTIONS introspection: the OpenAPI schema is the description
    "EXCEPTION_HANDLER": "api.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Launch and follow GPU batch jobs and services on the team's quota.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "StateEnum": "jobs.models.State",
        "KindEnum": "jobs.models.Kind",
        "MemberRoleEnum": "identity.models.Role",
        "TopologyEnum": "jobs.services.spec_fields.TOPOLOGY_CHOICES",
        "CheckpointWorkspaceEnum": "jobs.services.spec_fields.CHECKPOINT_WORKSPACES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.forbid_unknown_request_fields",
    ],
    # Docs assets are served from the drf-spectacular-sidecar package: no CDN, no outside network.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
# Throttle counters live in Redis so every web process counts the same requests; if Redis is down
# requests are let through (api.throttling).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "api": {
        # JSON only: Django's RedisCache unpickles what it reads (portal/cache.py).
        "BACKEND": "portal.cache.JsonRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "gpuportal-api",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
    }
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "api"},  # DEBUG, no Redis
}
# Personal API tokens: how many a person may hold, and when a new one expires unless they choose.
API_MAX_TOKENS_PER_USER = env_int("API_MAX_TOKENS_PER_USER", 20, minimum=1)
API_TOKEN_DEFAULT_DAYS = env_int("API_TOKEN_DEFAULT_DAYS", 90, minimum=1)
# --- the service proxy (/w/<uid>/, proxy/) ---------------------------------------------------------
PROXY_PREFIX = "/w/"
PROXY_CONNECT_TIMEOUT = env_int("PROXY_CONNECT_TIMEOUT", 5, minimum=1)  # seconds to reach the pod
# Seconds a backend may take to start answering (headers) before the browser gets the timeout page; once
# it answers, a streaming response (event streams, long polls) may go on as long as it likes.
PROXY_RESPONSE_TIMEOUT = env_int("PROXY_RESPONSE_TIMEOUT", 60, minimum=1)
PROXY_ACCESS_CACHE_SECONDS = env_int("PROXY_ACCESS_CACHE_SECONDS", 2, minimum=0)
PROXY_ENDPOINT_CACHE_SECONDS = env_int("PROXY_ENDPOINT_CACHE_SECONDS", 5, minimum=0)
PROXY_ACTIVITY_WRITE_SECONDS = env_int("PROXY_ACTIVITY_WRITE_SECONDS", 60, minimum=1)
PROXY_STARTING_REFRESH_SECONDS = env_int("PROXY_STARTING_REFRESH_SECONDS", 3, minimum=1)
PROXY_WS_MAX_MESSAGE_BYTES = env_int("PROXY_WS_MAX_MESSAGE_BYTES", 64 * 1024 * 1024, minimum=1024)
# Serve the services from an origin of their own (recommended in production; SECURITY.md): e.g.
# `https://apps.example.org`, or `https://{uid}.apps.example.org` for one origin per service (wildcard DNS
# and certificate). Open links then go through the portal, which hands the signed-in person over to the
# proxy with a single-use ticket; the proxy keeps its own cookie there, and the portal's session cookie
# never reaches the apps' origin. Empty: /w/ is on the portal's own origin (simplest; `make run`).
PROXY_ORIGIN = env_str("PROXY_ORIGIN", "").rstrip("/")
PROXY_TICKET_SECONDS = env_int("PROXY_TICKET_SECONDS", 60, minimum=5, maximum=600)  # a handoff ticket's life
PROXY_APP_COOKIE_NAME = "gpuportal_open"  # the proxy's own sign-in on the apps' origin, one per service path
PROXY_APP_COOKIE_SECONDS = env_int("PROXY_APP_COOKIE_SECONDS", 12 * 3600, minimum=60)
if PROXY_ORIGIN:
    _apps, _portal = urlsplit(PROXY_ORIGIN.replace("{uid}", "uid")), urlsplit(SITE_URL)
    if _apps.scheme not in ("http", "https") or not _apps.hostname or _apps.path or _apps.query:
        raise ConfigError(
            f"PROXY_ORIGIN must be a scheme and host such as https://apps.example.org, not {PROXY_ORIGIN!r}"
        )
    if _apps.hostname == _portal.hostname:
        # Cookies are shared across ports: the same host name would hand the portal's session to the apps.
        raise ConfigError("PROXY_ORIGIN must use another host name than SITE_URL (a different port is not enough)")
# Where no ingress routes /w/ (`make run`, docker compose on one box): where the proxy sends every request
# outside /w/ (the web), so one origin serves the portal and its services. Empty behind an ingress.
PROXY_PORTAL_UPSTREAM = env_str("PROXY_PORTAL_UPSTREAM", "")
# SSH into services (issue 39): how often an open session's token and access are checked again (a revoked
# token or an un-share cuts it within this), and how many public keys a person may keep.
SSH_RECHECK_SECONDS = env_int("SSH_RECHECK_SECONDS", 20, minimum=1, maximum=60)
SSH_MAX_KEYS_PER_USER = env_int("SSH_MAX_KEYS_PER_USER", 20, minimum=1)
# The cookies the proxied app may never read or set, beside the session and CSRF cookies.
PROXY_BLOCKED_COOKIES = env_list("PROXY_BLOCKED_COOKIES", ["messages"])

API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
API_CURSOR_MAX_AGE_SECONDS = env_int("API_CURSOR_MAX_AGE_SECONDS", 24 * 3600, minimum=60)
API_IDEMPOTENCY_TTL_SECONDS = env_int("API_IDEMPOTENCY_TTL_SECONDS", 24 * 3600, minimum=60)
API_LOG_FOLLOW_SECONDS = env_int("API_LOG_FOLLOW_SECONDS", 3600, minimum=10)
# --- container logs ---
# A followed log holds a web thread: capped per user and site-wide (counted in PostgreSQL, so the caps
# hold with Redis down), and per web process (so each keeps threads for pages; keep it below gunicorn's
# --threads).
LOG_FOLLOW_MAX_PER_USER = env_int("LOG_FOLLOW_MAX_PER_USER", 4, minimum=1)
LOG_FOLLOW_MAX_TOTAL = env_int("LOG_FOLLOW_MAX_TOTAL", 64, minimum=1)
LOG_FOLLOW_MAX_PER_PROCESS = env_int("LOG_FOLLOW_MAX_PER_PROCESS", 4, minimum=1)
# The page's live log stream ends after this long in all (the browser can start it again).
LOG_FOLLOW_PAGE_SECONDS = env_int("LOG_FOLLOW_PAGE_SECONDS", 600, minimum=10)
LOG_MAX_LINE_CHARS = env_int("LOG_MAX_LINE_CHARS", 4096, minimum=80)
LOG_MAX_BYTES = env_int("LOG_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
LOG_MAX_FOLLOW_BYTES = env_int("LOG_MAX_FOLLOW_BYTES", 64 * 1024 * 1024, minimum=1024)
API_QUEUE_LIMIT = 500
# The most days one usage report covers, both ends counted: the page, the API and admin alike.
USAGE_MAX_DAYS = 366
