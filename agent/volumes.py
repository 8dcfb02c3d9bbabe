"""How full the persistent volumes mounted on this node are, read from the kubelet's pod directories.

The kubelet mounts every volume of a pod under

    <kubelet root>/pods/<pod uid>/volumes/<plugin, e.g. kubernetes.io~csi>/<volume name>

and for a PersistentVolume the volume name is the PV's name, which the portal maps to its workspace
(the claim's spec.volumeName). A CSI volume's filesystem sits one level deeper, in `.../<name>/mount`.

How a volume is measured, cheapest first:
- a volume that is a whole filesystem of its own (a mount point whose root is the filesystem's root, per
  /proc/self/mountinfo: a CSI block volume, an NFS export): statvfs, one system call;
- anything else (a directory on a shared disk, a bind mount of a subdirectory): a walk that adds up the
  blocks files occupy, as du does. It never follows a symbolic link, never crosses into another
  filesystem, counts a hard-linked file once, and stops after `max_entries` entries: a volume too big
  to walk is left out (the portal keeps its last reading) rather than slowing the agent down.

Nothing here writes anything, and nothing outside the kubelet root is read except /proc/self/mountinfo.
Scratch and configuration volumes (emptyDir, secrets, config maps, projected, downward API) are skipped.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.report import MAX_VOLUMES, VOLUME_NAME, VolumeReading

log = logging.getLogger(__name__)

DEFAULT_MAX_ENTRIES = 200_000
# Directories deeper than this are not walked (each level holds one open descriptor during the walk).
MAX_DEPTH = 128
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Plugins whose volumes live and die with the pod: never a workspace, never worth a walk.
EPHEMERAL_PLUGINS = frozenset(
    {
        "kubernetes.io~empty-dir",
        "kubernetes.io~secret",
        "kubernetes.io~configmap",
        "kubernetes.io~projected",
        "kubernetes.io~downward-api",
    }
)


@dataclass(frozen=True)
class Usage:
    used_bytes: int
    capacity_bytes: int | None = None


class TooLarge(Exception):
    """The walk met more entries than it may visit."""


def kubelet_volume_dirs(kubelet_root: Path) -> dict[str, Path]:
    """PV name -> the directory holding its files, for every persistent volume some pod on this node
    mounts (a volume mounted by two pods is listed once). Symbolic links are never followed."""
    found: dict[str, Path] = {}
    for pod in _subdirs(kubelet_root / "pods"):
        for plugin in _subdirs(pod / "volumes"):
            if plugin.name in EPHEMERAL_PLUGINS:
                continue
            for volume in _subdirs(plugin):
                if volume.name in found or not VOLUME_NAME.fullmatch(volume.name):
                    continue
                mount = volume / "mount"  # CSI: the filesystem is mounted one level down
                found[volume.name] = mount if plugin.name == "kubernetes.io~csi" and _is_dir(mount) else volume
    return found


def _subdirs(directory: Path) -> Iterator[Path]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield Path(entry.path)
        except OSError:
            continue


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def mount_roots(mountinfo: Path = Path("/proc/self/mountinfo")) -> dict[str, str]:
    """Mount point -> the path inside its filesystem that is mounted there ("/" for a whole filesystem,
    a subdirectory for a bind mount), from this process's own view of the mounts."""
    roots: dict[str, str] = {}
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return roots
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:
            roots[_unescape(fields[4])] = _unescape(fields[3])
    return roots


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \040, \011, \012 and \134.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def filesystem_usage(path: Path) -> Usage:
    """What a whole filesystem holds, by statvfs (blocks the root user may use count as free space)."""
    info = os.statvfs(path)
    capacity = info.f_blocks * info.f_frsize
    used = (info.f_blocks - info.f_bfree) * info.f_frsize
    return Usage(used_bytes=min(used, capacity), capacity_bytes=capacity)


def _open_top(path: Path) -> tuple[int, os.stat_result, list[os.DirEntry[str]]]:
    """(descriptor, stat, entries) of the volume's top directory; nothing is left open on failure."""
    top_fd = os.open(path, _DIRECTORY_FLAGS)  # fails on a symlink: a volume is never a link
    try:
        return top_fd, os.fstat(top_fd), list(os.scandir(top_fd))
    except BaseException:
        os.close(top_fd)
        raise


def _counted(entry: os.DirEntry[str], device: int, seen_links: set[int]) -> os.stat_result | None:
    """The entry's stat when its blocks count: not vanished, on the volume's own filesystem, and a file
    with several links counted once (its inode is noted in `seen_links`)."""
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return None  # vanished meanwhile: measure what is there
    if info.st_dev != device:
        return None  # another filesystem mounted inside: not this volume's
    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
        if info.st_ino in seen_links:
            return None
        seen_links.add(info.st_ino)
    return info


def _open_directory(name: str, parent_fd: int) -> tuple[int, list[os.DirEntry[str]]] | None:
    """(descriptor, entries) of directory `name` under `parent_fd`, opened without following a link; None
    when it is not a directory any more or cannot be read (nothing is left open then)."""
    try:
        child = os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)
    except OSError:
        return None  # replaced by a symlink or a file meanwhile, or unreadable: not walked
    try:
        return child, list(os.scandir(child))
    except OSError:
        os.close(child)
        return None


def directory_usage(path: Path, *, max_entries: int = DEFAULT_MAX_ENTRIES, max_depth: int = MAX_DEPTH) -> Usage:
    """Bytes the files under `path` occupy on disk (du's figure); raises TooLarge past `max_entries`
    entries or `max_depth` levels.

    Each directory is opened relative to its parent's descriptor with O_NOFOLLOW, so a symbolic link
    swapped in while the walk runs (by a user's pod writing to the volume) still leads nowhere; one
    descriptor is open per level, never more than `max_depth`."""
    top_fd, top, entries = _open_top(path)
    device, used = top.st_dev, top.st_blocks * 512
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = [(top_fd, iter(entries))]
    visited = len(entries)
    seen_links: set[int] = set()
    try:
        if visited > max_entries:
            raise TooLarge(f"more than {max_entries} entries")
        while stack:
            fd, entries_left = stack[-1]
            entry = next(entries_left, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            info = _counted(entry, device, seen_links)
            if info is None:
                continue
            used += info.st_blocks * 512
            if not stat.S_ISDIR(info.st_mode):
                continue
            if len(stack) >= max_depth:
                raise TooLarge(f"directories nested deeper than {max_depth}")
            opened = _open_directory(entry.name, fd)
            if opened is None:
                continue
            child, listed = opened
            stack.append((child, iter(listed)))
            visited += len(listed)
            if visited > max_entries:
                raise TooLarge(f"more than {max_entries} entries")
    finally:
        for fd, _ in stack:
            os.close(fd)
    return Usage(used_bytes=used)


def volume_usage(path: Path, roots: Mapping[str, str], *, max_entries: int = DEFAULT_MAX_ENTRIES) -> Usage:
    """statvfs when `path` is a whole filesystem of its own, else a bounded walk."""
    if roots.get(os.path.abspath(path)) == "/":
        return filesystem_usage(path)
    return directory_usage(path, max_entries=max_entries)


def measure(
    directories: Mapping[str, Path],
    *,
    roots: Mapping[str, str] | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> tuple[VolumeReading, ...]:
    """A reading per volume (at most MAX_VOLUMES, by name); volumes that cannot be measured are left out."""
    roots = {} if roots is None else roots
    readings: list[VolumeReading] = []
    for name in sorted(directories)[:MAX_VOLUMES]:
        try:
            usage = volume_usage(directories[name], roots, max_entries=max_entries)
        except TooLarge as exc:
            log.warning("volume %s not measured: %s", name, exc)
            continue
        except OSError:
            continue  # unmounted while we looked: it is gone from the next pass too
        readings.append(VolumeReading(name=name, used_bytes=usage.used_bytes, capacity_bytes=usage.capacity_bytes))
    return tuple(readings)


class VolumeMeter:
    """Measures the node's volumes every `interval_seconds` (far less often than GPUs are sampled)."""

    def __init__(
        self,
        kubelet_root: Path,
        *,
        interval_seconds: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        mountinfo: Path = Path("/proc/self/mountinfo"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kubelet_root = kubelet_root
        self.interval_seconds = interval_seconds
        self.max_entries = max_entries
        self.mountinfo = mountinfo
        self._clock = clock
        self._next = 0.0

    def due(self) -> bool:
        return self._clock() >= self._next

    def measure(self) -> tuple[VolumeReading, ...]:
        self._next = self._clock() + self.interval_seconds
        return measure(
            kubelet_volume_dirs(self.kubelet_root), roots=mount_roots(self.mountinfo), max_entries=self.max_entries
        )
