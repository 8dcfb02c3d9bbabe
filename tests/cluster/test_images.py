"""The real nodes' images (issue 35, item 3): each image's OCI archive, as containerd would import it, run
with runc — the runtime the real nodes use — from its own config (entry point, user, environment).

The images are built by `localcluster.images.ensure()` only when the cache lacks them (a cold build takes
minutes: see the report in localcluster/images.py); with a warm cache this module takes seconds per image.
Needs root (runc, as on the real nodes); skipped with the reason where that is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import images

pytestmark = [pytest.mark.images, pytest.mark.slow]

if os.geteuid() != 0 or shutil.which("runc") is None:
    pytest.skip("running images needs root and runc (devtools/system-deps.sh runc)", allow_module_level=True)


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


class Container:
    """One runc container from an unpacked image, its process started from the image's config."""

    def __init__(self, workdir: Path, archive: Path, args: list[str] | None = None, host_network: bool = False):
        self.id = f"gpuportal-imgtest-{uuid.uuid4().hex[:8]}"
        self.bundle = workdir / self.id
        rootfs = self.bundle / "rootfs"
        rootfs.mkdir(parents=True)
        self.config = _unpack(archive, rootfs)
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
        spec["root"] = {"path": "rootfs", "readonly": False}
        if host_network:
            spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"] if n["type"] != "network"]
        (self.bundle / "config.json").write_text(json.dumps(spec))
        self.output = self.bundle / "output.log"

    def start(self) -> subprocess.Popen:
        with self.output.open("wb") as out:
            return subprocess.Popen(
                ["runc", "run", "--bundle", self.bundle, self.id],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def run(self, timeout: float = 120) -> tuple[int, str]:
        proc = self.start()
        try:
            code = proc.wait(timeout=timeout)
        finally:
            self.remove()
        return code, self.output.read_text(errors="replace")

    def state(self) -> str:
        proc = subprocess.run(["runc", "state", self.id], capture_output=True, text=True, check=False)
        return json.loads(proc.stdout)["status"] if proc.returncode == 0 else "gone"

    def remove(self) -> None:
        subprocess.run(["runc", "delete", "--force", self.id], capture_output=True, check=False)


@pytest.fixture
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("images")
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
        deadline = time.monotonic() + 20
        while box.state() != "running" and time.monotonic() < deadline:
            time.sleep(0.2)
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (a local URL)
                return response.status, response.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_jupyterlab_serves_under_the_base_path_the_portal_passes_without_a_token(workdir):
    code, output = Container(workdir, _archive("jupyterlab"), args=["--version"]).run()
    assert code == 0, output
    assert output.strip().startswith("4."), output
    port = _free_port()
    # What the catalog's JupyterLab entry appends (jobs/services/seeding.py, base_url_args), on a free port.
    args = ["--ServerApp.base_url=/w/abc123/", "--IdentityProvider.token=", "--ServerApp.password=", f"--port={port}"]
    lab = Container(workdir, _archive("jupyterlab"), args=args, host_network=True)
    proc = lab.start()
    try:
        status, body = _get(f"http://127.0.0.1:{port}/w/abc123/api/status", timeout=90)
        assert status == 200
        assert "started" in json.loads(body)
        status, body = _get(f"http://127.0.0.1:{port}/w/abc123/lab", timeout=10)
        assert status == 200
        assert "JupyterLab" in body
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["runc", "kill", lab.id, "TERM"], check=True, capture_output=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        proc.kill()
        lab.remove()


def test_tensorboard_serves_a_run_under_the_path_prefix_the_portal_passes(workdir):
    code, output = Container(workdir, _archive("tensorboard"), args=["--version"]).run()
    assert code == 0, output
    assert output.strip().startswith("2."), output
    port = _free_port()
    # The catalog's TensorBoard entry: `--logdir /logs --bind_all` and `--path_prefix=<base path>`.
    args = ["--logdir=/tmp", "--host=127.0.0.1", f"--port={port}", "--path_prefix=/w/tb42"]
    board = Container(workdir, _archive("tensorboard"), args=args, host_network=True)
    proc = board.start()
    try:
        status, body = _get(f"http://127.0.0.1:{port}/w/tb42/data/environment", timeout=90)
        assert status == 200
        assert json.loads(body)["data_location"] == "/tmp"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["runc", "kill", board.id, "TERM"], check=True, capture_output=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        proc.kill()
        board.remove()
