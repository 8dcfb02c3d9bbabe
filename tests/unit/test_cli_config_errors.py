"""The CLI's configuration as a scripting team meets it: a URL or token that cannot be one, a config file that
cannot be read, an address that answers but is not the portal. Each is one line naming what is wrong and an
exit code a script can tell apart (2: configuration, 3: no portal there), never a traceback."""

from __future__ import annotations

import http.server
import threading

import pytest

from cli.main import main


@pytest.fixture(autouse=True)
def _no_config_file(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUPORTAL_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("GPUPORTAL_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("GPUPORTAL_TOKEN", "gpp_not-used")


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    "token",
    [
        "\u201cgpp_abc\u201d",  # pasted with typographic quotes
        "gpp_abc\nsecond-line",  # two lines of a file
        "gpp_abc def",  # two words
        "gpp_\u00e9t\u00e9",
    ],
)
def test_a_token_that_cannot_be_one_is_a_configuration_error(capsys, monkeypatch, token):
    monkeypatch.setenv("GPUPORTAL_TOKEN", token)
    code, err = _run(capsys, "list")
    assert code == 2, err
    assert "token" in err
    assert "cannot reach" not in err


@pytest.mark.parametrize(
    "url", ["http://", "https:///api", "http://127.0.0.1:99999", "http://[::1", "http://host:port"]
)
def test_a_url_that_cannot_be_one_is_a_configuration_error(capsys, monkeypatch, url):
    monkeypatch.setenv("GPUPORTAL_URL", url)
    code, err = _run(capsys, "list")
    assert code == 2, err
    assert f"URL {url!r}" in err
    assert "cannot reach" not in err


def test_a_config_file_that_is_not_text_is_named(capsys, monkeypatch, tmp_path):
    config = tmp_path / "config.toml"
    config.write_bytes(b"\xff\xfeurl = 1")
    monkeypatch.setenv("GPUPORTAL_CONFIG", str(config))
    monkeypatch.delenv("GPUPORTAL_URL")
    code, err = _run(capsys, "list")
    assert code == 2
    assert f"cannot read {config}" in err


def test_nothing_listening_says_so_and_what_to_check(capsys):
    code, err = _run(capsys, "gpu-types")
    assert code == 3
    assert "cannot reach the portal at http://127.0.0.1:1" in err
    assert "GPUPORTAL_URL" in err  # where the address came from, to check it


class _SomeOtherApp(http.server.BaseHTTPRequestHandler):
    """A web server that is not the portal: a page for every path, as a single-page app or a proxy's
    landing page answers."""

    def _page(self) -> None:
        body = b"<!DOCTYPE html><html><body>Welcome</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_app():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SomeOtherApp)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["--json", "list"],
        ["gpu-types"],
        ["queue"],
        ["cancel", "0123abcd"],
        ["submit", "--gpu-type", "p100", "--image", "python:3.12", "--", "python", "-c", "1"],
    ],
)
def test_an_address_that_answers_but_is_not_the_portal_is_said_in_one_line(capsys, monkeypatch, other_app, argv):
    monkeypatch.setenv("GPUPORTAL_URL", other_app)
    code, err = _run(capsys, *argv)
    assert code == 3, err
    assert f"{other_app}/api/v1 is not the GPU Portal's API" in err
    assert len(err.strip().splitlines()) == 1
