"""The real nodes' images (issue 35, item 3): each image's OCI archive, as containerd would import it, run
with runc — the runtime the real nodes use — from its own config (entry point, user, environment).

The images are built by `localcluster.images.ensure()` only when the cache lacks them (a cold build takes
minutes: see the report in localcluster/images.py); with a warm cache this module takes seconds per image.
Needs root (runc, as on the real nodes); skipped with the reason where that is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import images

pytestmark = [pytest.mark.images, pytest.mark.slow]

if os.geteuid() != 0:
    pytest.skip("building and running the images needs root (as the real nodes do)", allow_module_level=True)


@pytest.fixture(autouse=True, scope="module")
def _packages() -> None:
    images.system_packages()  # buildah, mmdebstrap, gcc, runc: Debian's, via devtools/system-deps.sh


def _archive(name: str) -> Path:
    """The image's OCI archive, built first if the cache lacks it (or an image below it)."""
    return images.ensure([name], progress=print)[name]


def _blob(archive: tarfile.TarFile, digest: str) -> bytes:
    handle = archive.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
    assert handle is not None
    return handle.read()


def _unpack(path: Path, rootfs: Path) -> dict:
    """Apply the image's layers in order (OCI whiteouts included) under rootfs; return the image config."""
    with tarfile.open(path) as archive:
        index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(_blob(archive, index["manifests"][0]["digest"]))
        config = json.loads(_blob(archive, manifest["config"]["digest"]))
        for layer in manifest["layers"]:
            handle = archive.extractfile("blobs/sha256/" + layer["digest"].split(":", 1)[1])
            with tarfile.open(fileobj=handle, mode="r:*") as tar:
                members = []
                for member in tar:
                    folder, _, name = member.name.rpartition("/")
                    if name == ".wh..wh..opq":
                        for child in (rootfs / folder).glob("*"):
                            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
                    elif name.startswith(".wh."):
                        gone = rootfs / folder / name[4:]
                        if gone.is_dir() and not gone.is_symlink():
                            shutil.rmtree(gone)
                        else:
                            gone.unlink(missing_ok=True)
                    else:
                        members.append(member)
                tar.extractall(rootfs, members=members, numeric_owner=True, filter="fully_trusted")  # noqa: S202 (our own images)
    return config["config"]


_UNPACKED: dict[Path, tuple[Path, dict]] = {}


def _rootfs(archive: Path, workdir: Path) -> tuple[Path, dict]:
    """The image unpacked once per test session (its root filesystem, its config)."""
    if archive not in _UNPACKED:
        rootfs = workdir / f"rootfs-{archive.stem}"
        rootfs.mkdir()
        _UNPACKED[archive] = (rootfs, _unpack(archive, rootfs))
    return _UNPACKED[archive]


class Container:
    """One runc container from an unpacked image, its process started from the image's config; in a network
    namespace of its own (`netns`, loopback up) when one is given, else with none but runc's empty one."""

    def __init__(self, workdir: Path, archive: Path, args: list[str] | None = None, netns: str | None = None):
        self.id = f"gpuportal-imgtest-{uuid.uuid4().hex[:8]}"
        self.bundle = workdir / self.id
        self.bundle.mkdir()
        rootfs, self.config = _rootfs(archive, workdir.parent)
        subprocess.run(["runc", "spec", "--bundle", self.bundle], check=True)
        spec = json.loads((self.bundle / "config.json").read_text())
        user = self.config.get("User", "0:0")
        uid, _, gid = user.partition(":")
        command = (self.config.get("Entrypoint") or []) + (args if args is not None else (self.config.get("Cmd") or []))
        spec["process"].update(
            terminal=False,
            args=command,
            env=self.config.get("Env") or [],
            cwd=self.config.get("WorkingDir") or "/",
            user={"uid": int(uid), "gid": int(gid or uid)},
        )
        spec["root"] = {"path": str(rootfs), "readonly": False}
        # As the kubelet does for every container: an /etc/hosts that names localhost.
        (self.bundle / "hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
        hosts = {"destination": "/etc/hosts", "type": "bind", "source": str(self.bundle / "hosts")}
        spec["mounts"].append({**hosts, "options": ["rbind", "ro"]})
        if netns:
            for namespace in spec["linux"]["namespaces"]:
                if namespace["type"] == "network":
                    namespace["path"] = f"/var/run/netns/{netns}"
        (self.bundle / "config.json").write_text(json.dumps(spec))
        self.output = self.bundle / "output.log"

    def start(self) -> subprocess.Popen:
        """Start the container's process in the background; return once runc says it runs (or it ended)."""
        with self.output.open("wb") as out:
            proc = subprocess.Popen(
                ["runc", "run", "--bundle", self.bundle, self.id],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while self.state() != "running" and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        return proc

    def run(self, timeout: float = 120) -> tuple[int, str]:
        proc = self.start()
        try:
            code = proc.wait(timeout=timeout)
        finally:
            self.remove()
        return code, self.output.read_text(errors="replace")

    def fetch(self, url: str, timeout: float) -> dict:
        """GET a JSON URL from inside the container (its own python3), retrying until it answers."""
        script = (
            "import sys, time, urllib.request\n"
            f"deadline = time.time() + {timeout}\n"
            "while True:\n"
            "    try:\n"
            "        print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()); break\n"
            "    except OSError:\n"
            "        if time.time() > deadline: raise\n"
            "        time.sleep(1)\n"
        )
        proc = subprocess.run(
            ["runc", "exec", self.id, "python3", "-c", script, url],
            capture_output=True,
            text=True,
            timeout=timeout + 30,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-2000:] + self.output.read_text(errors="replace")[-2000:]
        return json.loads(proc.stdout)

    def stop(self, proc: subprocess.Popen) -> int | None:
        subprocess.run(["runc", "kill", self.id, "TERM"], capture_output=True, check=False)
        try:
            return proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            return None
        finally:
            self.remove()

    def state(self) -> str:
        proc = subprocess.run(["runc", "state", self.id], capture_output=True, text=True, check=False)
        return json.loads(proc.stdout)["status"] if proc.returncode == 0 else "gone"

    def remove(self) -> None:
        subprocess.run(["runc", "delete", "--force", self.id], capture_output=True, check=False)


@pytest.fixture(autouse=True, scope="module")
def _unpacked_images_go_at_the_end() -> Iterator[None]:
    yield
    for rootfs, _ in _UNPACKED.values():
        shutil.rmtree(rootfs, ignore_errors=True)
    _UNPACKED.clear()


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("images")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of the test's own, loopback up: a server in it is reachable from its own
    container only, never from the host or the network."""
    name = f"gpuportal-imgtest-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def test_every_image_has_its_reference_and_an_archive_containerd_can_import():
    for name, path in images.ensure(progress=print).items():
        with tarfile.open(path) as archive:
            index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        refs = [m.get("annotations", {}).get("org.opencontainers.image.ref.name") for m in index["manifests"]]
        assert refs == [images.IMAGES[name]]
        assert images.IMAGES[name].startswith("localhost/gpuportal/")


def test_the_sandbox_waits_until_sigterm_then_exits_0(workdir):
    box = Container(workdir, _archive("sandbox"))
    assert box.config["Entrypoint"] == ["/pause"]
    proc = box.start()
    try:
        time.sleep(1)
        assert proc.poll() is None, "the sandbox must keep waiting"
        assert box.state() == "running"
        subprocess.run(["runc", "kill", box.id, "TERM"], check=True)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        box.remove()


def test_python_batch_image_runs_a_training_shaped_script_as_uid_1000(workdir):
    script = (
        "import os, pathlib, sys\n"
        "home = pathlib.Path(os.environ['HOME'])\n"
        "(home / 'checkpoints').mkdir(exist_ok=True)\n"
        "(home / 'checkpoints' / 'step-1.pt').write_text('weights')\n"
        "print('uid', os.getuid(), 'home', home, 'ckpt', sorted(p.name for p in (home / 'checkpoints').iterdir()))\n"
        "sys.exit(3)\n"
    )
    box = Container(workdir, _archive("python"), args=["python", "-c", script])
    code, output = box.run()
    assert code == 3, output
    assert "uid 1000 home /home/user ckpt ['step-1.pt']" in output


def test_jupyterlab_serves_under_the_base_path_the_portal_passes_without_a_token(workdir, netns):
    code, output = Container(workdir, _archive("jupyterlab"), args=["--version"]).run()
    assert code == 0, output
    assert output.strip().startswith("4."), output
    # What the catalog's JupyterLab entry appends (jobs/services/seeding.py, base_url_args), and another port.
    args = ["--ServerApp.base_url=/w/abc123/", "--IdentityProvider.token=", "--ServerApp.password=", "--port=8899"]
    lab = Container(workdir, _archive("jupyterlab"), args=args, netns=netns)
    proc = lab.start()
    try:
        status = lab.fetch("http://127.0.0.1:8899/w/abc123/api/status", timeout=120)
        assert "started" in status
        contents = lab.fetch("http://127.0.0.1:8899/w/abc123/api/contents", timeout=10)
        assert contents["path"] == ""  # the notebook's root: the home of uid 1000, listed without a token
    finally:
        code = lab.stop(proc)
    assert code == 0, "SIGTERM stops JupyterLab cleanly"


def test_tensorboard_serves_under_the_path_prefix_the_portal_passes(workdir, netns):
    code, output = Container(workdir, _archive("tensorboard"), args=["--version"]).run()
    assert code == 0, output
    assert output.strip().splitlines()[-1].startswith("2."), output  # after a note that TensorFlow is absent
    # The catalog's TensorBoard entry: `--logdir /logs --bind_all` and `--path_prefix=<base path>`.
    args = ["--logdir=/tmp", "--bind_all", "--path_prefix=/w/tb42"]
    board = Container(workdir, _archive("tensorboard"), args=args, netns=netns)
    proc = board.start()
    try:
        environment = board.fetch("http://127.0.0.1:6006/w/tb42/data/environment", timeout=120)
        assert environment["data_location"] == "/tmp"
    finally:
        board.stop(proc)


@pytest.mark.skipif(
    not images.archive_path("portal").exists() and os.environ.get("GPUPORTAL_TEST_PORTAL_IMAGE") != "1",
    reason="the portal's image is built by `make images NAMES=portal` (minutes; its key follows every change "
    "to the checkout), or here with GPUPORTAL_TEST_PORTAL_IMAGE=1",
)
def test_the_portals_own_image_built_here_runs_django_as_its_own_user(workdir):
    script = "id -u; python manage.py check; gunicorn --version; test -f /app/staticfiles/vendor/htmx.min.js"
    box = Container(workdir, _archive("portal"), args=["sh", "-c", script])
    spec = json.loads((box.bundle / "config.json").read_text())
    spec["process"]["env"].append("SECRET_KEY=only-for-this-check-" + "x" * 40)
    # With DEBUG off the settings refuse to load without the portal's own Redis (nothing here connects to it).
    spec["process"]["env"].append("REDIS_URL=redis://check-only.invalid:6379/0")
    (box.bundle / "config.json").write_text(json.dumps(spec))
    code, output = box.run()
    assert code == 0, output
    assert output.splitlines()[0] == "10001", output
    assert "System check identified no issues" in output
    assert "gunicorn (version" in output
