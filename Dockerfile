# syntax=docker/dockerfile:1
# GPU Portal: one image for every process. The command picks the role:
#   web      gunicorn portal.wsgi:application --bind 0.0.0.0:8000   (the default CMD)
#   worker   celery -A portal worker
#   beat     celery -A portal beat --schedule /tmp/celerybeat-schedule
#   tracker  python manage.py track
#   migrate  python manage.py migrate --noinput
# Static files are collected at build time and served by WhiteNoise, so no volume or web server is needed
# for them. The root filesystem can be mounted read-only; only /tmp must be writable.

# Both bases are build arguments: `python -m localcluster.images portal` points them at images built on this
# machine from Debian's packages (localhost/gpuportal/python and .../node), with no registry.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:20-bookworm-slim

# --- assets: the pages' browser libraries from the npm registry (pinned in package-lock.json) ------------
FROM ${NODE_IMAGE} AS assets
WORKDIR /assets
COPY package.json package-lock.json ./
COPY devtools/vendor.sh ./vendor.sh
RUN npm ci --omit=dev --no-audit --no-fund --loglevel=error \
 && bash vendor.sh node_modules /assets/vendor

# --- build: a virtualenv with the pinned runtime dependencies, the project and its static files ---------
FROM ${PYTHON_IMAGE} AS build
# The build steps install into /opt and /app as root, whichever user the base image names; this stage is
# thrown away (the runtime stage below ends as the portal's own user).
# hadolint ignore=DL3002
USER 0:0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
# Dependencies first: this layer is rebuilt only when the pins change, not on every code change.
COPY requirements/base.txt requirements/constraints.txt /app/requirements/
RUN pip install -r /app/requirements/base.txt
COPY . /app
COPY --from=assets /assets/vendor /app/static/vendor
WORKDIR /app
# devtools/ (in the context for vendor.sh only) goes first: the image ships no development code.
# Editable, so the project's console scripts (gpuportal-agent) exist while BASE_DIR stays /app (settings
# find templates/ and static/ next to the code). Then collect and compress the static files for
# WhiteNoise; the settings need a secret key to load with DEBUG off, so this step gets a throwaway one
# that is not kept (tests/deploy/test_dockerfile.py runs this same step).
RUN rm -rf /app/devtools \
 && pip install --no-deps -e . \
 && DEBUG=0 SECRET_KEY=collectstatic-only STATIC_ROOT=/app/staticfiles \
    python manage.py collectstatic --noinput -v 0 \
 && python -m compileall -q /app

# --- runtime: slim Python, the virtualenv and the code, a non-root user ---------------------------------
FROM ${PYTHON_IMAGE} AS runtime
USER 0:0
# tini as PID 1 passes SIGTERM on to gunicorn, celery or the tracker and reaps zombies.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini=0.19.* \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 portal \
 && useradd --system --uid 10001 --gid portal --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin portal
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    DJANGO_SETTINGS_MODULE=portal.settings \
    STATIC_ROOT=/app/staticfiles \
    PORTAL_VAR_DIR=/tmp/gpuportal
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
WORKDIR /app
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["/usr/bin/tini", "--"]
# --worker-tmp-dir: gunicorn's heartbeat files go to memory, not to the (possibly read-only) image.
# Threaded workers: a followed log stream holds a thread, not a whole worker process.
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--worker-class", "gthread", "--threads", "8", \
     "--worker-tmp-dir", "/dev/shm", "--access-logfile", "-"]
