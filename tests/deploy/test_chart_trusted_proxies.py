"""config.trustedProxies: the chart tells the portal whose forwarding headers to believe (TRUSTED_PROXIES)."""

from __future__ import annotations

import pytest

from portal.env import ConfigError, env_networks
from portal.security import is_trusted_proxy
from tests.deploy.helm import render, render_error


def config_map(values: dict) -> dict[str, str]:
    [cm] = [m.obj for m in render(values) if m.kind == "ConfigMap" and m.name.endswith("-config")]
    return cm["data"]


def test_by_default_the_private_ranges_where_an_ingress_controller_runs_are_believed():
    data = config_map({})
    assert data["TRUSTED_PROXIES"] == "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fd00::/8"
    assert data["PROXY_TRUSTED_PROXIES"] == data["TRUSTED_PROXIES"]  # the service proxy sits behind it too
    assert config_map({"config": {"trustedProxies": []}})["TRUSTED_PROXIES"] == ""


def test_the_ingress_controllers_network_is_believed_and_nobody_else(monkeypatch, settings):
    data = config_map({"config": {"trustedProxies": ["10.42.0.0/16", "192.0.2.7", "2001:db8::/32"]}})
    assert data["TRUSTED_PROXIES"] == "10.42.0.0/16,192.0.2.7,2001:db8::/32"
    # What the portal makes of the rendered value at start-up (portal/settings.py reads it this way).
    monkeypatch.setenv("TRUSTED_PROXIES", data["TRUSTED_PROXIES"])
    settings.TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")
    assert is_trusted_proxy("10.42.7.9")
    assert is_trusted_proxy("192.0.2.7")
    assert is_trusted_proxy("2001:db8::1")
    assert not is_trusted_proxy("10.43.0.1")
    assert not is_trusted_proxy("192.0.2.8")


@pytest.mark.parametrize("bad", ["ingress-nginx", "10.42.0.0/16,10.43.0.0/16", "", "http://10.0.0.1"])
def test_a_value_that_is_not_an_address_is_refused_naming_it(bad):
    assert "trustedProxies" in render_error({"config": {"trustedProxies": [bad]}})


def test_a_bad_entry_stops_the_portal_at_start_up_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.0/8, 10.0.0.300")
    with pytest.raises(ConfigError, match=r"TRUSTED_PROXIES: '10\.0\.0\.300'"):
        env_networks("TRUSTED_PROXIES")
