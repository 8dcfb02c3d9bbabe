"""SSH into a running service through the portal: `ssh-proxy` (ssh's ProxyCommand), `ssh`, `ssh-config`.

No port is opened anywhere: ssh runs `gpuportal ssh-proxy <uid>`, which opens a WebSocket to the portal's
service proxy (`/w/_ssh/<uid>`, authenticated with the API token) and copies bytes between it and ssh's
stdin/stdout. SSH's own encryption and the pod's host key check run end to end through it, so scp, rsync,
`-L` port forwards and VS Code Remote-SSH work as with any ProxyCommand.

The WebSocket client is the `websockets` library's synchronous one (already pinned for the portal): two
threads, one per direction, no event loop to set up in a short-lived helper.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
from collections.abc import Iterable
from typing import BinaryIO
from urllib.parse import urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI
from websockets.sync.client import connect

HOST_PREFIX = "gpuportal-"
POD_USER = "user"  # the account sshd runs as in the portal's dev-environment image (uid 1000)
CLOSE_REVOKED = 4403
READ_CHUNK = 256 * 1024
_UID = re.compile(r"^[0-9a-f]{1,16}$")


class TunnelError(Exception):
    """The tunnel could not open or was cut; the message is for the person, `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def uid_from_host(host: str) -> str:
    """`%h` as ssh hands it: the uid itself, `gpuportal-<uid>`, or either with a domain after a dot."""
    name = host.strip().lower().split(".", 1)[0]
    name = name.removeprefix(HOST_PREFIX)
    if not _UID.match(name):
        raise TunnelError(f"{host!r} is not a service's id (the 16-character uid the portal shows)", code=2)
    return name


def tunnel_url(portal_url: str, uid: str) -> str:
    """The WebSocket address of a service's SSH tunnel on the portal (ws:// or wss:// as the portal's)."""
    parts = urlsplit(portal_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, f"{parts.path.rstrip('/')}/w/_ssh/{uid}", "", ""))


def proxy_command_line(command: str, *, origin: str = "") -> str:
    """ssh's ProxyCommand for this client. With services on an origin of their own (the portal's host then has
    no /w/), the tunnel is dialled there: `--origin` says so, read from the portal's own answer (ssh_origin)."""
    if origin:
        return f"{command} ssh-proxy --origin {shlex.quote(origin.rstrip('/'))} %h"
    return f"{command} ssh-proxy %h"


def reachable(services: Iterable[dict]) -> list[dict]:
    """The services `ssh-config` lists: running ones whose image runs an SSH server. (A portal too old to say
    `ssh` lists every running service.)"""
    return [s for s in services if s.get("state") == "RUNNING" and s.get("ssh", True)]


def host_block(uid: str, *, name: str = "", command: str = "gpuportal", origin: str = "") -> str:
    """An ssh_config `Host` block for one service, read as is by ssh and VS Code Remote-SSH."""
    comment = f"# {name} ({uid})" if name else f"# {uid}"
    return "\n".join(
        [
            comment,
            f"Host {HOST_PREFIX}{uid}",
            f"    HostName {uid}",
            f"    User {POD_USER}",
            f"    ProxyCommand {proxy_command_line(command, origin=origin)}",
            f"    HostKeyAlias {HOST_PREFIX}{uid}",
            "    StrictHostKeyChecking accept-new",
            "    ServerAliveInterval 30",
            "",
        ]
    )


def config_text(services: Iterable[dict], *, command: str = "gpuportal") -> str:
    blocks = [
        host_block(s["uid"], name=s.get("name", ""), command=command, origin=s.get("ssh_origin", "")) for s in services
    ]
    return "\n".join(blocks) if blocks else "# No running services of yours with an SSH server to reach.\n"


def ssh_command(
    uid: str, command: list[str], *, proxy_command: str, forwards: Iterable[str] = (), origin: str = "",
) -> list[str]:  # fmt: skip
    """The ssh command line `gpuportal ssh` runs (the host key is remembered under gpuportal-<uid>)."""
    via = proxy_command_line(proxy_command, origin=origin)
    options = [
        "-o", f"ProxyCommand={via}",
        "-o", f"HostKeyAlias={HOST_PREFIX}{uid}",
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", "ServerAliveInterval=30",
        "-l", POD_USER,
    ]  # fmt: skip
    for forward in forwards:
        options += ["-L", forward]
    return ["ssh", *options, uid, *command]


def run_proxy(url: str, token: str, *, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """Copy stdin to the tunnel and the tunnel to stdout until either ends; raises TunnelError."""
    source = stdin if stdin is not None else sys.stdin.buffer
    sink = stdout if stdout is not None else sys.stdout.buffer
    try:
        ws = connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            compression=None,  # SSH's bytes are encrypted: nothing to gain
            max_size=None,
            open_timeout=30,
            ping_interval=30,  # keeps idle tunnels alive through load balancers
            ping_timeout=60,
            user_agent_header="gpuportal-cli/1 ssh-proxy",
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        if status in (403, 404):
            raise TunnelError("no running service with that id that you may open (404)") from None
        if status == 503:
            raise TunnelError("the service is not running yet; try again when the portal shows it Running") from None
        if status == 502:
            raise TunnelError("the service runs but nothing answers SSH in it (does its image run sshd?)") from None
        raise TunnelError(f"the portal refused the tunnel (HTTP {status})") from None
    except (OSError, TimeoutError, InvalidURI) as exc:
        raise TunnelError(f"cannot reach the portal at {url}: {exc}", code=3) from None

    def upstream() -> None:
        read = getattr(source, "read1", source.read)
        try:
            while True:
                data = read(READ_CHUNK)
                if not data:
                    break
                ws.send(data)
        except (ConnectionClosed, OSError, ValueError):
            pass
        finally:
            ws.close()

    thread = threading.Thread(target=upstream, name="ssh-proxy-upstream", daemon=True)
    thread.start()
    try:
        for message in ws:
            sink.write(message if isinstance(message, bytes) else message.encode())
            sink.flush()
    except ConnectionClosed:
        pass
    except BrokenPipeError:
        ws.close()
        return
    if ws.close_code == CLOSE_REVOKED:
        raise TunnelError("the portal ended this session: your token was revoked or your access to it ended")


def exec_ssh(argv: list[str]) -> int:
    """Replace this process with ssh (a child would stand between ssh and the terminal for nothing)."""
    try:
        os.execvp(argv[0], argv)  # noqa: S606 - a fixed program, arguments as a list
    except FileNotFoundError:
        print("gpuportal: no ssh client found; install OpenSSH (or use the Terminal tab)", file=sys.stderr)
        return 2
    return 0  # not reached: exec replaced this process
