"""CPU seconds spent by each part of the run (API server, etcd, worker, tracker, PostgreSQL, ...) between two
moments, read from /proc: where a side's time went, beside the wall-clock figure.

Only the run's own processes count: the descendants of the process that started the benchmark (devtools.testenv,
which owns PostgreSQL and Redis). On a machine shared with other runs, their processes are not ours and
are left out. A process that exited meanwhile is counted through its parent's reaped-children times.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")

# A process is named by its program (binaries) or, for Python ones, by the first pattern in its command line.
PROGRAMS = {
    "etcd": "etcd",
    "kube-apiserver": "kube-apiserver",
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "postgres": "postgres",
    "redis-server": "redis",
}
PATTERNS = (
    ("localcluster.simulator", "simulator"),
    ("provisioner@", "provisioner"),
    (" worker ", "worker"),
    (" beat ", "beat"),
    ("manage.py track", "tracker"),
    ("gunicorn", "web"),
    ("-m benchmarks", "bench"),
)


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def _part(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    # PostgreSQL's backends rewrite their title ("postgres: user db 127.0.0.1(5432) idle").
    program = os.path.basename(argv[0].decode(errors="replace")).split(":")[0].strip()
    if program in PROGRAMS:
        return PROGRAMS[program]
    command = " ".join(a.decode(errors="replace") for a in argv) + " "
    return next((part for pattern, part in PATTERNS if pattern in command), "other")


def _seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    # utime, stime, cutime, cstime (fields 14-17 of proc(5); 12-15 after the pid and name)
    return sum(int(v) for v in fields[11:15]) / _TICK


def _tally(root: int | None, label: Callable[[int], str | None]) -> dict[str, float]:
    """CPU seconds so far over `root` (default: this process's parent) and its descendants, summed by
    `label(pid)`; a process labelled None is left out (its descendants are still walked)."""
    root = os.getppid() if root is None else root
    children = _children()
    totals: dict[str, float] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, ()))
        name = label(pid)
        if name is not None:
            totals[name] = totals.get(name, 0.0) + _seconds(pid)
    return totals


def snapshot(root: int | None = None) -> dict[str, float]:
    """CPU seconds so far per part, over `root` (default: this process's parent) and its descendants."""
    return _tally(root, _part)


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per part between two snapshots (a part whose processes were replaced may show less)."""
    return {part: max(0.0, after.get(part, 0.0) - before.get(part, 0.0)) for part in after}


def describe(seconds: dict[str, float]) -> str:
    """`total 120.4 s: kube-apiserver 60.1, etcd 20.3, ...`, largest first."""
    total = sum(seconds.values())
    parts = ", ".join(
        f"{part} {value:.1f}" for part, value in sorted(seconds.items(), key=lambda kv: -kv[1]) if value >= 0.05
    )
    return f"total {total:.1f} s: {parts}"


def per_object(seconds: dict[str, float], n: int, what: str = "Job") -> str:
    """`describe`, then the same per object: `...; ms per Job: kube-apiserver 6.01, etcd 2.03, ...`."""
    each = ", ".join(
        f"{part} {1000 * value / n:.2f}"
        for part, value in sorted(seconds.items(), key=lambda kv: -kv[1])
        if value >= 0.05
    )
    return f"{describe(seconds)}; ms per {what}: {each}"


def _postgres_role(pid: int) -> str | None:
    """A PostgreSQL process's role from its title ("postgres: walwriter", "postgres: user db host idle"); the
    postmaster (its reaped children's times: autovacuum workers, closed connections) as "exited"."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    title = " ".join(a.decode(errors="replace") for a in argv if a).strip()
    if title.startswith("postgres:"):
        role = title.split(":", 1)[1].strip()
    elif title and os.path.basename(title.split()[0]) == "postgres":
        return "exited"
    else:
        return None
    for kind in ("walwriter", "checkpointer", "background writer", "autovacuum", "logical replication", "stats"):
        if role.startswith(kind):
            return kind
    return "backends"


def postgres_snapshot(root: int | None = None) -> dict[str, float]:
    """CPU seconds so far of the run's PostgreSQL processes, by role (`_postgres_role`)."""
    return _tally(root, _postgres_role)


def _times(stat: str) -> tuple[float, float]:
    """(user, system) CPU seconds from a `/proc/.../stat` line (utime and stime: fields 14 and 15 of proc(5))."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def threads(pid: int) -> dict[str, tuple[float, float]]:
    """(user, system) CPU seconds so far of one process's threads, by the name the operating system knows
    them by (`/proc/<pid>/task/<tid>/comm`: the tracker names its watch threads, `watch_loop.name_os_thread`),
    the process's first thread as "main"; threads that share a name are summed, and what threads that have
    ended spent (the process's own total less its live threads') is "ended". Empty once the process is gone."""
    try:
        total = _times(Path(f"/proc/{pid}/stat").read_text())
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return {}
    found: dict[str, tuple[float, float]] = {}
    for task in tasks:
        try:
            user, system = _times((task / "stat").read_text())
            name = "main" if task.name == str(pid) else (task / "comm").read_text().strip()
        except OSError:  # ended meanwhile: its time is in "ended"
            continue
        was = found.get(name, (0.0, 0.0))
        found[name] = (was[0] + user, was[1] + system)
    live = tuple(sum(times[i] for times in found.values()) for i in (0, 1))
    found["ended"] = (max(0.0, total[0] - live[0]), max(0.0, total[1] - live[1]))
    return found


def threads_spent(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    """(user, system) CPU seconds per thread name between two `threads` readings of one process (pure); a
    thread that started meanwhile counts from zero. Empty when either reading is (the process was replaced)."""
    if not before or not after:
        return {}
    spent = {}
    for name, (user, system) in after.items():
        was = before.get(name, (0.0, 0.0))
        spent[name] = (max(0.0, user - was[0]), max(0.0, system - was[1]))
    return spent


def per_thread(spent: dict[str, tuple[float, float]], n: int) -> str:
    """`main 3.10 (user 2.50, system 0.60), watch-Pod 1.20 (...), ...` in ms per object, largest first."""
    rows = sorted(spent.items(), key=lambda kv: -sum(kv[1]))
    return ", ".join(
        f"{name} {1000 * (user + system) / n:.2f} (user {1000 * user / n:.2f}, system {1000 * system / n:.2f})"
        for name, (user, system) in rows
    )
