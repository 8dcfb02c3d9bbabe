"""The rules a client can check before sending (spec_rules), and the CLI checking them with the portal's
own words before any request: a bad variable name, a sweep whose given name leaves no room for -0, -1, …,
and a sweep over the cap. The CLI talks to an address nobody listens on: a refusal here sends nothing."""

from __future__ import annotations

import pytest

import spec_rules
from cli import main as cli_main
from jobs.services import validation
from jobs.services.submission.intake import copies_of
from jobs.services.validation import SubmissionInvalid

NOWHERE = ["--url", "http://127.0.0.1:9", "--token", "gpp_test"]


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = cli_main.main([*NOWHERE, "submit", "--image", "docker.io/x:1", "--gpu-type", "p100", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("LR", None),
        ("_PRIVATE", None),
        ("GPUPORTAL_ARRAY_INDEX", None),  # the submitter's to set
        ("1BAD", "'1BAD' is not a valid variable name (letters, digits, '_'; not starting with a digit)."),
        ("A-B", "'A-B' is not a valid variable name (letters, digits, '_'; not starting with a digit)."),
        ("X" * 129, f"{'X' * 40!r} is not a valid variable name (letters, digits, '_'; not starting with a digit)."),
        ("CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES is set by the portal and cannot be overridden."),
        ("GPUPORTAL_TOKEN", "GPUPORTAL_TOKEN is set by the portal and cannot be overridden."),
    ],
)
def test_one_variable_name_rule(name, problem):
    assert spec_rules.env_name_problem(name) == problem


def test_the_engine_judges_plain_and_secret_variables_by_that_rule():
    expected = spec_rules.env_name_problem("1BAD")
    assert validation.check_env({"1BAD": "x"}).problems == (("env", expected),)
    refs = validation.check_secret_refs([{"name": "key", "env": "1BAD"}], {"key": "s-key"}, set())
    assert refs.problems == (("secrets", expected),)


def test_cli_refuses_a_bad_variable_name_before_sending(capsys):
    code, err = run_cli(capsys, "--env", "1BAD=x")
    assert code == cli_main.EXIT_FAILED  # as when the portal refuses; not "unreachable"
    assert f"  env: {spec_rules.env_name_problem('1BAD')}" in err


def test_cli_refuses_a_bad_secret_variable_name_before_sending(capsys):
    code, err = run_cli(capsys, "--secret", "key=NVIDIA_VISIBLE_DEVICES")
    assert code == cli_main.EXIT_FAILED
    assert "  secrets: NVIDIA_VISIBLE_DEVICES is set by the portal and cannot be overridden." in err


def test_a_sweep_name_without_room_for_its_suffixes_is_refused_by_intake_and_cli(capsys):
    name = "n" * spec_rules.MAX_NAME
    expected = f"With 10 copies the name may have at most {spec_rules.MAX_NAME - 2} characters (each gets -0, -1, …)."
    assert spec_rules.sweep_name_problem(name, 10) == expected
    with pytest.raises(SubmissionInvalid) as refused:
        copies_of({"name": name, "kind": "batch"}, 10, base_name=name)
    assert refused.value.errors == {"name": [expected]}
    code, err = run_cli(capsys, "--array", "10", "--name", name)
    assert code == cli_main.EXIT_FAILED
    assert f"  name: {expected}" in err


def test_a_sweep_name_that_fits_is_used_as_given_and_a_made_up_one_is_cut():
    fits = "n" * (spec_rules.MAX_NAME - 2)
    assert [c["name"] for c in copies_of({"name": fits}, 10, base_name=fits)][-1] == fits + "-9"
    made_up = copies_of({"name": ""}, 10, base_name="p" * spec_rules.MAX_NAME)
    assert made_up[-1]["name"] == "p" * (spec_rules.MAX_NAME - 2) + "-9"


def test_cli_members_are_the_launch_pages(capsys, monkeypatch):
    sent = {}

    def submit_many(self, items, team=None):
        sent["items"] = items
        return []

    monkeypatch.setattr(cli_main.PortalClient, "submit_many", submit_many)
    code, _ = run_cli(capsys, "--array", "3", "--name", "sweep", "--env", "LR=0.1")
    assert code == cli_main.EXIT_OK
    base = {"name": "sweep", "env": [{"name": "LR", "value": "0.1"}]}
    page = copies_of(base, 3, base_name="sweep")
    assert [(i["name"], i["env"]) for i in sent["items"]] == [(p["name"], p["env"]) for p in page]


@pytest.mark.parametrize("count", [0, spec_rules.SWEEP_AT_MOST + 1])
def test_cli_refuses_a_sweep_over_the_one_cap(capsys, count):
    code, err = run_cli(capsys, "--array", str(count))
    assert code == cli_main.EXIT_USAGE
    assert f"1 to {spec_rules.SWEEP_AT_MOST} copies" in err


@pytest.mark.parametrize("limit", ["0", "-5"])
def test_list_with_a_limit_below_one_is_a_usage_error_not_an_empty_table(capsys, limit):
    """`gpuportal list --limit 0` printed an empty table and exit 0, which reads as "nothing there"."""
    with pytest.raises(SystemExit) as usage:
        cli_main.main([*NOWHERE, "list", "--limit", limit])
    assert usage.value.code == cli_main.EXIT_USAGE
    assert "--limit" in capsys.readouterr().err


@pytest.mark.parametrize("given", ["https://gpus.example.org/api/v1", "https://gpus.example.org/api/v1/",
                                   "https://gpus.example.org/"])  # fmt: skip
def test_the_portal_url_may_be_given_as_the_api_address_the_readme_names(monkeypatch, given):
    """`--url https://host/api/v1` (the REST API's address, as api/README.md names it) made every command
    answer 404 "No such API endpoint": the client adds /api/v1 itself."""
    from cli import config

    monkeypatch.setenv("GPUPORTAL_CONFIG", "/nonexistent/config.toml")
    assert config.load(url=given, token="gpp_x").url == "https://gpus.example.org"


def test_output_still_buffered_when_the_reader_has_gone_ends_quietly_with_141(monkeypatch):
    """`gpuportal list | head -1` on a busy machine: the command's last lines were still in Python's
    buffer when head left, so the flush at exit failed and the CLI ended 120. It flushes while it can
    still say 141 (as for a pipe broken mid-write)."""
    import io
    import os
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone
    stdout = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8")  # block-buffered, as into a pipe

    def short_listing(client, args):
        print("UID  NAME")  # fits the buffer: nothing reaches the pipe before the command returns
        return cli_main.EXIT_OK

    monkeypatch.setitem(cli_main.COMMANDS, "list", short_listing)
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert cli_main.main([*NOWHERE, "list"]) == 141
    finally:
        monkeypatch.undo()
        stdout.close()
