"""Container images for the local cluster's real nodes, built on this machine: no registry, no Docker engine.

    python -m localcluster.images [NAME ...]            build what is missing (all catalog images by default)
    python -m localcluster.images --rebuild [NAME ...]  build again even when the cache has them (`make images`)

How an image is made:
- `sandbox`: localcluster/images/pause.c compiled with `gcc -static`; the image holds that one file. It is the
  sandbox ("pause") image of every pod on the real nodes: it waits, and SIGTERM/SIGINT end it.
- `base`: a Debian bookworm root filesystem from Debian's packages (`mmdebstrap --variant=minbase`, no
  documentation, man pages or locales), with a user `user` (uid/gid 1000, home /home/user), put into an image
  with buildah (`buildah from scratch`, `buildah add` of the tarball, `buildah config`, `buildah commit`).
- `python`, `jupyterlab`, `tensorboard`: each a layer on its parent made by `buildah run` in the parent's
  root filesystem (apt-get without recommends, then the apt lists removed; pip with `--no-index` from a wheel
  directory downloaded beforehand from the pins in localcluster/images/*.txt, no pip cache kept). `python`
  also carries /usr/local/bin/gpuportal (cli/incontainer.py, standard library only): `gpuportal checkpoint`
  inside a batch job, and in the images built on it.
Every image ends as an OCI archive (`buildah push ... oci-archive:`) that `ctr -n k8s.io images import`
accepts, under ~/.cache/gpuportal/images/ (GPUPORTAL_CACHE moves it, as for the Kubernetes binaries), named by
a key: a hash of everything that goes into the image (this file, the pins, pause.c, the parent's key). A
second call finds the archives and returns at once; a changed input makes a new key, hence a new build.

buildah runs with its own storage in a throwaway directory, the `vfs` storage driver and `--isolation chroot`:
this machine's root sits in a container (no overlay-on-overlay, no user namespaces needed that way). It
needs root. Debian packages it needs are installed by devtools/system-deps.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import functools
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
INPUTS = HERE / "images"
REPO_ROOT = HERE.parent
CACHE_DIR = (
    Path(
        os.environ.get("GPUPORTAL_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuportal"
    )
    / "images"
)
SUITE = "bookworm"
MIRROR = os.environ.get("GPUPORTAL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
PYTHON_VERSION = "3.11.2"  # bookworm's python3: the wheels are chosen for it (Requires-Python included)
USER_UID = 1000
USER_HOME = "/home/user"
SYSTEM_PACKAGES = ("buildah", "mmdebstrap", "gcc", "libc6-dev", "runc")  # runc: tests/cluster/test_images.py
REGISTRY = "localhost/gpuportal"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEVENV_ENTRYPOINT = "/usr/local/bin/gpuportal-devenv"
# `gpuportal checkpoint` inside a batch job (issue 37): the client's standard-library-only helper, one file.
INCONTAINER_HELPER = REPO_ROOT / "cli" / "incontainer.py"
INCONTAINER_COMMAND = "/usr/local/bin/gpuportal"

Progress = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the step and ends with the tool's own last lines."""


@dataclass(frozen=True)
class Spec:
    name: str
    repo: str  # the reference is localhost/gpuportal/<repo>:<key>
    parent: str | None = None
    packages: tuple[str, ...] = ()  # Debian packages added in this layer
    pins: str | None = None  # localcluster/images/<pins>: every pip package of this layer, pinned
    venv: str | None = None  # where the pinned packages go (a venv made with bookworm's python3)
    config: dict = field(default_factory=dict)  # buildah config: entrypoint, cmd, env, port, user, workdir


def _user_config(**more) -> dict:
    return {"user": f"{USER_UID}:{USER_UID}", "workdir": USER_HOME, **more}


SPECS: dict[str, Spec] = {
    spec.name: spec
    for spec in (
        Spec("sandbox", "pause", config={"entrypoint": ["/pause"], "user": "65535:65535"}),
        Spec(
            "base",
            "base",
            config=_user_config(env={"PATH": PATH, "LANG": "C.UTF-8", "HOME": USER_HOME}, cmd=["/bin/bash"]),
        ),
        Spec(
            "python",
            "python",
            parent="base",
            # python-is-python3: `python train.py` works as in the usual images; python3-venv: venvs work.
            packages=("python3", "python-is-python3", "python3-venv", "ca-certificates"),
            config=_user_config(env={"PYTHONUNBUFFERED": "1"}, cmd=["python3"]),
        ),
        Spec(
            "jupyterlab",
            "jupyterlab",
            parent="python",
            pins="jupyterlab.txt",
            venv="/opt/jupyterlab",
            # The portal appends its own arguments (--ServerApp.base_url=/w/<uid>/, no token) after these; the
            # port comes from JUPYTER_PORT so that an argument may still choose another (traitlets refuses a
            # setting given twice on the command line).
            config=_user_config(
                env={"PATH": f"/opt/jupyterlab/bin:{PATH}", "SHELL": "/bin/bash", "JUPYTER_PORT": "8888"},
                entrypoint=["jupyter", "lab", "--ip=0.0.0.0", "--no-browser", f"--ServerApp.root_dir={USER_HOME}"],
                cmd=[],
                port=8888,
            ),
        ),
        Spec(
            "tensorboard",
            "tensorboard",
            parent="python",
            pins="tensorboard.txt",
            venv="/opt/tensorboard",
            config=_user_config(
                env={"PATH": f"/opt/tensorboard/bin:{PATH}"},
                entrypoint=["tensorboard"],
                cmd=["--logdir=/logs", "--bind_all", "--port=6006"],
                port=6006,
            ),
        ),
        # JupyterLab plus Debian's OpenSSH server, started as the pod's own non-root user by
        # images/devenv-entrypoint.sh (SSH through the portal, issue 39); the catalog's command starts with it.
        Spec(
            "devenv",
            "devenv",
            parent="jupyterlab",
            packages=("openssh-server", "openssh-sftp-server", "rsync", "git", "less", "procps"),
            config=_user_config(
                env={"PATH": f"/opt/jupyterlab/bin:{PATH}", "SHELL": "/bin/bash", "JUPYTER_PORT": "8888"},
                entrypoint=[
                    DEVENV_ENTRYPOINT,
                    "jupyter",
                    "lab",
                    "--ip=0.0.0.0",
                    "--no-browser",
                    f"--ServerApp.root_dir={USER_HOME}",
                ],
                cmd=[],
                port=8888,
            ),
        ),
        # Only for the portal's image below (its Dockerfile's assets stage runs `npm ci`): Debian's nodejs and npm.
        Spec("node", "node", parent="python", packages=("nodejs", "npm"), config={"user": "0:0", "cmd": ["node"]}),
        # The project's own Dockerfile, built by `buildah bud` with PYTHON_IMAGE and NODE_IMAGE pointed at the
        # images above; its config (user 10001, tini, gunicorn) is the Dockerfile's.
        Spec("portal", "portal", parent="python"),
    )
}
DEFAULT_NAMES = ("sandbox", "base", "python", "jupyterlab", "tensorboard")  # `portal` (and `node`) when asked


@functools.cache
def _key(name: str) -> str:
    spec = SPECS[name]
    digest = hashlib.sha256()
    # What goes into the image: its spec (packages, config), the code that builds it, its inputs, its parent.
    builder = {"sandbox": _build_sandbox, "base": _build_base, "portal": _build_portal, "python": _build_python}.get(
        name, _build_layer
    )
    recipe = [builder, _Buildah, _run, _wheels] if spec.pins else [builder, _Buildah, _run]
    if name == "devenv":
        recipe.append(_build_devenv)
    if name == "python":
        recipe.append(_build_layer)
    digest.update(repr(spec).encode())
    digest.update(repr((SUITE, MIRROR, USER_UID, USER_HOME, PATH)).encode())
    if spec.pins:
        digest.update(PYTHON_VERSION.encode())
    for part in recipe:
        digest.update(inspect.getsource(part).encode())
    if name == "sandbox":
        digest.update((INPUTS / "pause.c").read_bytes())
    if spec.pins:
        digest.update((INPUTS / spec.pins).read_bytes())
    if name == "devenv":
        digest.update((INPUTS / "devenv-entrypoint.sh").read_bytes())
    if name == "python":
        digest.update(INCONTAINER_HELPER.read_bytes())
    if spec.parent:
        digest.update(_key(spec.parent).encode())
    if name == "portal":
        digest.update(_key("node").encode())
        digest.update(_portal_context_digest().encode())
    digest.update(name.encode())
    return digest.hexdigest()[:16]


KEYS: dict[str, str] = {}  # filled below, once the build code they hash is defined
IMAGES: dict[str, str] = {}  # name -> reference, e.g. "sandbox" -> "localhost/gpuportal/pause:<key>"


def archive_path(name: str) -> Path:
    return CACHE_DIR / f"{name}-{KEYS[name]}.oci.tar"


def _order(names: Iterable[str]) -> list[str]:
    """The images asked for and the parents they need, parents first."""
    wanted: list[str] = []

    def add(name: str) -> None:
        if name not in SPECS:
            raise ImageBuildError(f"unknown image {name!r}; known: {', '.join(SPECS)}")
        parent = SPECS[name].parent
        if parent:
            add(parent)
        if name == "portal":
            add("node")
        if name not in wanted:
            wanted.append(name)

    for name in names:
        add(name)
    return wanted


class _Clock:
    def __init__(self, progress: Progress) -> None:
        self.start = time.monotonic()
        self.progress = progress

    def say(self, message: str) -> None:
        self.progress(f"[images] {message} ({time.monotonic() - self.start:.1f} s)")


def _run(cmd: list[str], step: str, log: Path, **kwargs) -> str:
    """Run one tool; its output goes to `log`; on failure raise with the step and the log's last lines."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out.flush()
        proc = subprocess.run(
            [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=out, text=True, check=False, **kwargs
        )
        out.write(proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise ImageBuildError(f"{step} failed (exit {proc.returncode}); the log {log} ends:\n{tail}")
    return proc.stdout.strip()


class _Buildah:
    """buildah with a private storage (vfs) under `work`, chroot isolation."""

    def __init__(self, work: Path, log: Path) -> None:
        self.base = ["buildah", "--root", str(work / "root"), "--runroot", str(work / "run"), "--storage-driver", "vfs"]
        self.log = log

    def __call__(self, step: str, *args: str) -> str:
        env = {**os.environ, "BUILDAH_ISOLATION": "chroot"}
        return _run([*self.base, *args], step, self.log, env=env)

    def configure(self, container: str, config: dict) -> None:
        args: list[str] = []
        if "user" in config:
            args += ["--user", config["user"]]
        if "workdir" in config:
            args += ["--workingdir", config["workdir"]]
        for key, value in (config.get("env") or {}).items():
            args += ["--env", f"{key}={value}"]
        if "entrypoint" in config:
            args += ["--entrypoint", json.dumps(config["entrypoint"])]
        if "cmd" in config:
            args += ["--cmd", json.dumps(config["cmd"])]
        if "port" in config:
            args += ["--port", f"{config['port']}/tcp"]
        args += ["--label", "org.opencontainers.image.source=gpuportal localcluster/images.py"]
        self("buildah config", "config", *args, container)

    def commit_and_push(self, container: str, name: str, target: Path) -> None:
        ref = IMAGES[name]
        self("buildah commit", "commit", "--quiet", "--format", "oci", "--rm", container, ref)
        partial = target.with_name(target.name + ".partial")
        partial.unlink(missing_ok=True)
        self("buildah push", "push", "--quiet", ref, f"oci-archive:{partial}:{ref}")
        partial.rename(target)


def _root_or_fail() -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building images needs root (mmdebstrap and buildah here run as root with chroot isolation); "
            "rerun as root, or with sudo"
        )


def system_packages() -> None:
    missing = [tool for tool in ("buildah", "mmdebstrap", "gcc", "runc") if shutil.which(tool) is None]
    if missing or not list(Path("/usr/lib").glob("*/libc.a")):  # libc.a: for gcc -static
        subprocess.run(["bash", str(REPO_ROOT / "devtools" / "system-deps.sh"), *SYSTEM_PACKAGES], check=True)


def _build_sandbox(buildah: _Buildah, work: Path, log: Path) -> str:
    binary = work / "pause"
    _run(["gcc", "-static", "-Os", "-s", "-o", binary, INPUTS / "pause.c"], "gcc -static pause.c", log)
    container = buildah("buildah from scratch", "from", "scratch")
    buildah("buildah copy", "copy", "--chmod", "0755", container, str(binary), "/pause")
    return container


def _build_base(buildah: _Buildah, work: Path, log: Path) -> str:
    rootfs = work / "base-rootfs.tar"
    hook = (
        f'chroot "$1" useradd --create-home --home-dir {USER_HOME} --uid {USER_UID} --user-group --shell /bin/bash user'
    )
    _run(
        [
            "mmdebstrap", "--variant=minbase", "--mode=root", "--quiet",
            "--skip=output/dev",
            "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/info/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--dpkgopt=path-include=/usr/share/locale/locale.alias",
            # Kept in the image: later layers' apt-get and dpkg honour the same exclusions.
            "--customize-hook=mkdir -p \"$1/etc/dpkg/dpkg.cfg.d\"",
            "--customize-hook=printf 'path-exclude=/usr/share/doc/*\\npath-exclude=/usr/share/man/*\\n"
            "path-exclude=/usr/share/info/*\\npath-exclude=/usr/share/locale/*\\n"
            "path-include=/usr/share/locale/locale.alias\\n' > \"$1/etc/dpkg/dpkg.cfg.d/01-gpuportal-small\"",
            "--customize-hook=printf 'APT::Install-Recommends \"false\";\\nAPT::Install-Suggests \"false\";\\n' "
            "> \"$1/etc/apt/apt.conf.d/01-gpuportal-small\"",
            f"--customize-hook={hook}",
            SUITE, rootfs, MIRROR,
        ],
        "mmdebstrap (Debian bookworm, minbase)",
        log,
    )  # fmt: skip
    container = buildah("buildah from scratch", "from", "scratch")
    buildah("buildah add (root filesystem)", "add", container, str(rootfs), "/")
    rootfs.unlink()
    return container


def _wheels(spec: Spec, clock: _Clock, log: Path) -> Path:
    """The pinned wheels of a layer, downloaded once (into the cache, keyed by the pins) for bookworm's python."""
    pins = INPUTS / str(spec.pins)
    digest = hashlib.sha256(pins.read_bytes()).hexdigest()[:16]
    target = CACHE_DIR / "wheels" / f"{spec.name}-{digest}"
    if (target / ".complete").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    clock.say(f"{spec.name}: downloading the pinned wheels ({pins.relative_to(REPO_ROOT)})")
    platforms = ["manylinux2014_x86_64", *(f"manylinux_2_{minor}_x86_64" for minor in range(17, 37)), "linux_x86_64"]
    _run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
            *(arg for platform in platforms for arg in ("--platform", platform)),
            "-r", pins, "-d", target,
        ],
        f"pip download for {spec.name}",
        log,
    )  # fmt: skip
    (target / ".complete").touch()
    return target


def _build_layer(spec: Spec, buildah: _Buildah, work: Path, log: Path, clock: _Clock) -> str:
    parent_archive = archive_path(str(spec.parent))
    container = buildah(f"buildah from {spec.parent}", "from", f"oci-archive:{parent_archive}")
    as_root = ["run", "--isolation", "chroot", "--user", "0:0", container, "--"]
    if spec.packages:
        clock.say(f"{spec.name}: apt-get install {' '.join(spec.packages)}")
        script = (
            "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
            f"apt-get install -y -qq --no-install-recommends {' '.join(spec.packages)} >/dev/null; "
            "apt-get clean; rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/apt/* /var/log/dpkg.log"
        )
        buildah(f"apt-get install in {spec.name}", *as_root, "sh", "-c", script)
    if spec.pins:
        wheels = _wheels(spec, clock, log)
        clock.say(f"{spec.name}: pip install into {spec.venv} ({len(list(wheels.glob('*.whl')))} pinned wheels)")
        # Paths inside the image being built, removed in the same layer.
        buildah("buildah copy (wheels)", "copy", container, str(wheels), "/tmp/wheels")  # noqa: S108
        buildah("buildah copy (pins)", "copy", container, str(INPUTS / str(spec.pins)), "/tmp/pins.txt")  # noqa: S108
        script = (
            f"set -e; python3 -m venv {spec.venv}; "
            f"{spec.venv}/bin/pip install --quiet --no-index --no-cache-dir --disable-pip-version-check "
            f"--find-links /tmp/wheels -r /tmp/pins.txt; "
            "rm -rf /tmp/wheels /tmp/pins.txt /root/.cache"
        )
        buildah(f"pip install in {spec.name}", *as_root, "sh", "-c", script)
    return container


def _build_devenv(spec: Spec, buildah: _Buildah, work: Path, log: Path, clock: _Clock) -> str:
    """The packages as any layer, then the entrypoint; Debian's own sshd service bits are not used (no root,
    no host keys in the image: each service makes its own, images/devenv-entrypoint.sh)."""
    container = _build_layer(spec, buildah, work, log, clock)
    buildah("buildah copy (entrypoint)", "copy", "--chmod", "0755", container,
            str(INPUTS / "devenv-entrypoint.sh"), DEVENV_ENTRYPOINT)  # fmt: skip
    script = (
        "set -e; rm -f /etc/ssh/ssh_host_*; "
        # A locked password ('!') would make a PAM-less sshd refuse even key logins; '*' matches no password.
        "usermod -p '*' user; install -d -m 0755 /run/sshd"
    )
    buildah(
        "prepare sshd in devenv", "run", "--isolation", "chroot", "--user", "0:0", container, "--", "sh", "-c", script
    )
    return container


def _build_python(spec: Spec, buildah: _Buildah, work: Path, log: Path, clock: _Clock) -> str:
    """The packages as any layer, then `gpuportal` (checkpoint reports from inside a batch job, cli/incontainer.py:
    standard library only, so the image needs no pip packages for it)."""
    container = _build_layer(spec, buildah, work, log, clock)
    buildah("buildah copy (gpuportal helper)", "copy", "--chmod", "0755", container,
            str(INCONTAINER_HELPER), INCONTAINER_COMMAND)  # fmt: skip
    return container


def _portal_context_digest() -> str:
    """What the portal's image is built from: the files git tracks that .dockerignore lets into the build
    context, as they are in the checkout (committed or not)."""
    ignore = REPO_ROOT / ".dockerignore"
    patterns = [p.strip() for p in ignore.read_text().splitlines()] if ignore.exists() else []
    patterns = [p for p in patterns if p and not p.startswith(("#", "!"))]

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(fnmatch.fnmatch(prefix, p.removeprefix("**/")) for p in patterns for prefix in prefixes)

    try:
        listing = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "ls-files", "--cached", "--modified", "-z"], capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: the Dockerfile alone
        return hashlib.sha256((REPO_ROOT / "Dockerfile").read_bytes()).hexdigest()
    digest = hashlib.sha256()
    for path in sorted(set(filter(None, listing.split("\0")))):
        if not ignored(path) and (REPO_ROOT / path).is_file():
            digest.update(path.encode() + b"\0" + hashlib.sha256((REPO_ROOT / path).read_bytes()).digest())
    return digest.hexdigest()


def _build_portal(buildah: _Buildah, work: Path, log: Path, clock: _Clock) -> None:
    """`buildah bud` of the project's Dockerfile, its bases pointed at the local python and node images."""
    for base in ("python", "node"):
        image_id = buildah(f"buildah pull {base}", "pull", "--quiet", f"oci-archive:{archive_path(base)}")
        buildah(f"buildah tag {base}", "tag", image_id.splitlines()[-1], IMAGES[base])
    # The Dockerfile's `npm ci` and `pip install` reach their registries through this machine's TLS trust
    # (which may hold a proxy's CA): its CA bundle, and configs naming it, are mounted into those steps only.
    trust: list[str] = []
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.exists():
        (work / "npmrc").write_text(f"cafile={bundle}\n")
        (work / "pip.conf").write_text(f"[global]\ncert = {bundle}\n")
        for source, target in ((bundle, bundle), (work / "npmrc", "/etc/npmrc"), (work / "pip.conf", "/etc/pip.conf")):
            trust += ["--volume", f"{source}:{target}:ro"]
    clock.say("portal: buildah bud of the project's Dockerfile (npm ci, pip install, collectstatic)")
    buildah(
        "buildah bud (Dockerfile)",
        "bud", "--isolation", "chroot", "--pull-never", "--format", "oci", "--layers=false", *trust,
        "--build-arg", f"PYTHON_IMAGE={IMAGES['python']}", "--build-arg", f"NODE_IMAGE={IMAGES['node']}",
        "--file", str(REPO_ROOT / "Dockerfile"), "--tag", IMAGES["portal"], str(REPO_ROOT),
    )  # fmt: skip
    clock.say("portal: writing its OCI archive")
    target = archive_path("portal")
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    buildah("buildah push", "push", "--quiet", IMAGES["portal"], f"oci-archive:{partial}:{IMAGES['portal']}")
    partial.rename(target)


@contextlib.contextmanager
def _locked(clock: _Clock) -> Iterator[None]:
    """One build at a time on this machine (tests in parallel, `make run` beside `make test`)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with (CACHE_DIR / ".lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            clock.say("another build of the images is running; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure(names: Iterable[str] | None = None, progress: Progress = print, rebuild: bool = False) -> dict[str, Path]:
    """Build the images asked for (all by default) that the cache lacks; return name -> OCI archive path.

    A second call with nothing to build returns at once. `rebuild` builds the asked-for images again.
    """
    asked = list(names) if names is not None else list(DEFAULT_NAMES)
    order = _order(asked)
    clock = _Clock(progress)
    if not rebuild and all(archive_path(name).exists() for name in order):
        clock.say(f"found in {CACHE_DIR}: {', '.join(asked)}")
        return {name: archive_path(name) for name in asked}
    _root_or_fail()
    system_packages()
    with _locked(clock):
        todo = [name for name in order if (rebuild and name in asked) or not archive_path(name).exists()]
        for name in order:
            if name not in todo:
                clock.say(f"{name}: cached ({IMAGES[name]})")
        for name in todo:
            _build_one(name, clock)
            _prune(name)
    return {name: archive_path(name) for name in asked}


STALE_AFTER_S = 7 * 86400


def _prune(name: str) -> None:
    """Archives of the image with another key (older inputs) go once unused for a week (other checkouts may
    still want them until then)."""
    for path in CACHE_DIR.glob(f"{name}-*"):
        if path.suffix in (".tar", ".log") and not path.name.startswith(f"{name}-{KEYS[name]}."):
            with contextlib.suppress(OSError):
                if time.time() - path.stat().st_atime > STALE_AFTER_S:
                    path.unlink()


def _build_one(name: str, clock: _Clock) -> None:
    spec = SPECS[name]
    clock.say(f"{name}: building {IMAGES[name]}")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"build-{name}-", dir=CACHE_DIR))
    log = CACHE_DIR / f"{name}-{KEYS[name]}.log"
    log.write_text(f"building {IMAGES[name]}\n")
    buildah = _Buildah(work, log)
    try:
        if name == "portal":
            _build_portal(buildah, work, log, clock)
            container = None
        elif name == "sandbox":
            container = _build_sandbox(buildah, work, log)
        elif name == "base":
            clock.say("base: mmdebstrap of Debian bookworm (minbase) from " + MIRROR)
            container = _build_base(buildah, work, log)
        elif name == "devenv":
            container = _build_devenv(spec, buildah, work, log, clock)
        elif name == "python":
            container = _build_python(spec, buildah, work, log, clock)
        else:
            container = _build_layer(spec, buildah, work, log, clock)
        if container is not None:
            buildah.configure(container, spec.config)
            clock.say(f"{name}: committing the image and writing its OCI archive")
            buildah.commit_and_push(container, name, archive_path(name))
    finally:
        with contextlib.suppress(ImageBuildError):
            buildah("buildah rm", "rm", "--all")
        shutil.rmtree(work, ignore_errors=True)
    size = archive_path(name).stat().st_size / 2**20
    clock.say(f"{name}: built in {time.monotonic() - started:.0f} s, {size:.0f} MiB -> {archive_path(name)}")


KEYS.update({name: _key(name) for name in SPECS})
IMAGES.update({name: f"{REGISTRY}/{SPECS[name].repo}:{KEYS[name]}" for name in SPECS})


def import_into(
    ctr_address: str, names: Iterable[str] | None = None, progress: Progress = print, snapshotter: str | None = None
) -> None:
    """Import the images (built first if missing) into one containerd, listening on `ctr_address`, in the
    namespace the kubelet's CRI uses (k8s.io), unpacked for `snapshotter` (containerd's default when None).
    Importing an image it already holds changes nothing."""
    paths = ensure(names, progress=progress)
    clock = _Clock(progress)
    for name, path in paths.items():
        cmd = ["ctr", "--address", ctr_address, "--namespace", "k8s.io", "images", "import"]
        cmd += [f"--snapshotter={snapshotter}"] if snapshotter else []
        cmd += [str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageBuildError(
                f"ctr images import of {IMAGES[name]} into {ctr_address} failed: {proc.stderr.strip()}"
            )
        clock.say(f"{name}: imported into {ctr_address}")


# The GPU types of the local cluster's real nodes (localcluster/realnode.py labels them gputype=real-<type>):
# small per-GPU CPU and memory so a 2-core machine runs several pods, and a memory limit a script can exceed.
REAL_GPU_TYPES = (
    {"slug": "real-p100", "display_name": "P100 (real node)", "node_label_value": "real-p100",
     "cpu_per_gpu_millicores": 250, "memory_per_gpu_mib": 1024, "billing_weight": "1.0"},
    {"slug": "real-k2", "display_name": "K2 (real node)", "node_label_value": "real-k2",
     "cpu_per_gpu_millicores": 250, "memory_per_gpu_mib": 1024, "billing_weight": "0.5"},
)  # fmt: skip


def catalog_seed(quota_team: str | None = None) -> dict:
    """A seed document (jobs.services.seeding.apply_seed) for catalog entries that point at these images,
    with `localhost` as an allowed registry, and the GPU types of the real nodes (with a quota of 4 each
    for `quota_team` when given). For the local cluster only (`make run` with GPUPORTAL_LOCAL_IMAGES=1,
    tests): no other cluster can pull a localhost/... reference."""
    # {home}: the owner's home workspace (left out where workspaces are off), so Open lands where files last.
    jupyter_args = [
        "--ServerApp.base_url={base_url}",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.root_dir={home}",
    ]
    quotas = [{"team": quota_team, "gpu_type": t["slug"], "max_gpus": 4} for t in REAL_GPU_TYPES if quota_team]
    return {
        "gpu_types": [dict(t) for t in REAL_GPU_TYPES],
        "default_quotas": quotas,
        "images": [
            {"reference": IMAGES["python"], "title": "Python 3 (local)", "suits": "batch",
             "description": "Debian's Python 3.11 built on this machine; runs as uid 1000. Bring your script.",
             "default_command": ["python", "train.py"]},
            {"reference": IMAGES["jupyterlab"], "title": "JupyterLab (local)", "suits": "service",
             "description": "JupyterLab built on this machine; press Open on its page once it runs. It opens "
                            "in your home workspace (/home/<you>): what you save there is kept between launches.",
             # The command in full, without the image entrypoint's root_dir: traitlets refuses a second one, and
             # the portal's `{home}` argument (jupyter_args) gives the owner's home workspace instead.
             "default_command": ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser"],
             "default_port": 8888, "base_url_args": jupyter_args},
            {"reference": IMAGES["devenv"], "title": "Dev environment: SSH + JupyterLab (local)", "suits": "service",
             "description": "JupyterLab with an SSH server beside it: gpuportal ssh, scp, rsync and VS Code "
                            "Remote-SSH reach it through the portal with the keys on your profile. $HOME is your "
                            "home workspace.",
             "default_command": [DEVENV_ENTRYPOINT, "jupyter", "lab", "--ip=0.0.0.0", "--no-browser"],
             "default_port": 8888, "base_url_args": jupyter_args, "runs_sshd": True},
            {"reference": IMAGES["tensorboard"], "title": "TensorBoard (local)", "suits": "service",
             "description": "TensorBoard built on this machine, serving the logs under /logs.",
             "default_command": ["tensorboard"], "default_args": ["--logdir", "/logs", "--bind_all"],
             "default_port": 6006, "base_url_args": ["--path_prefix={base_path}"]},
        ],
        "allowed_registries": ["localhost"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.images", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"images to build (default: all: {', '.join(DEFAULT_NAMES)})")
    parser.add_argument("--rebuild", action="store_true", help="build again even when cached")
    parser.add_argument("--list", action="store_true", help="print name, reference and archive path, build nothing")
    args = parser.parse_args(argv)
    if args.list:
        for name in args.names or DEFAULT_NAMES:
            print(f"{name}\t{IMAGES[name]}\t{archive_path(name)}")
        return 0
    try:
        ensure(args.names or None, progress=lambda line: print(line, file=sys.stderr, flush=True), rebuild=args.rebuild)
    except ImageBuildError as exc:
        print(f"[images] ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
