"""`make run` tells batch pods where the portal is (devtools/run.py relay_for_pods): a relay on the real
nodes' bridge gateway to the portal's port, here with the gateway on loopback (127.0.0.1) and a line server
standing in for the portal."""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path

from devtools import run
from tests.unit.test_hostrelay import echo_server  # noqa: F401 (fixture)


def _state(tmp_path: Path, subnet: str) -> Path:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "network.json").write_text(json.dumps({"subnet": subnet, "bridge": "gpb1"}))
    return tmp_path


def test_pods_are_told_a_relay_on_the_gateway_that_reaches_the_portal(tmp_path, monkeypatch, echo_server):  # noqa: F811
    monkeypatch.setattr(run, "PORT", echo_server.server_address[1])  # the portal's port on loopback
    env = {"LOCALCLUSTER_STATE_DIR": str(_state(tmp_path, "127.0.0.0/24"))}
    with contextlib.ExitStack() as stack:
        run.relay_for_pods(env, stack)
        url = env["PORTAL_POD_API_URL"]
        assert url.startswith("http://127.0.0.1:")
        assert env["ALLOWED_HOSTS"] == "127.0.0.1,localhost,[::1],127.0.0.1"  # the pods' Host header
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as conn:
            conn.sendall(b"GET /api/v1/\n")
            assert conn.makefile("rb").readline() == b"echo GET /api/v1/\n"


def test_no_real_nodes_or_an_address_already_given_leaves_pods_untold(tmp_path):
    env: dict[str, str] = {"LOCALCLUSTER_STATE_DIR": str(tmp_path)}
    with contextlib.ExitStack() as stack:
        run.relay_for_pods(env, stack)  # no real nodes' network
        assert "PORTAL_POD_API_URL" not in env
        given = {"LOCALCLUSTER_STATE_DIR": str(_state(tmp_path, "127.0.0.0/24")), "PORTAL_POD_API_URL": "http://x:1"}
        run.relay_for_pods(given, stack)
        assert given == {"LOCALCLUSTER_STATE_DIR": given["LOCALCLUSTER_STATE_DIR"], "PORTAL_POD_API_URL": "http://x:1"}


def test_a_bridge_that_is_not_up_is_said_and_skipped(tmp_path, capsys):
    env = {"LOCALCLUSTER_STATE_DIR": str(_state(tmp_path, "192.0.2.0/24"))}  # not an address of this machine
    with contextlib.ExitStack() as stack:
        run.relay_for_pods(env, stack)
    assert "PORTAL_POD_API_URL" not in env
    assert "pods are not told where the portal is: no relay on 192.0.2.1" in capsys.readouterr().err
