"""The CLI's usage errors: a bad flag or a bad workload id is named by the subcommand, before any request."""

from __future__ import annotations

import pytest

from cli.main import main


@pytest.fixture(autouse=True)
def _configured(monkeypatch):
    # A portal nobody serves: a usage error must come before any request is tried.
    monkeypatch.setenv("GPUPORTAL_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("GPUPORTAL_TOKEN", "gpp_not-used")


def _usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", ["logs", "cancel", "wait", "clone", "checkpoints", "open"])
@pytest.mark.parametrize("uid", ["../../admin", "abc/def", "12345678901234567", "not-an-id", ""])
def test_a_workload_id_that_cannot_be_one_is_a_usage_error(capsys, command, uid):
    err = _usage_error(capsys, command, uid)
    assert f"gpuportal {command}: error: argument uid: not a workload's id" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["usage", "--since", "2026-01-01"], "gpuportal usage: error: unrecognized arguments: --since"),
        (["logs", "0123abcd", "--bogus"], "gpuportal logs: error: unrecognized arguments: --bogus"),
        (["list", "--sate", "RUNNING"], "gpuportal list: error: unrecognized arguments: --sate"),
        (["secrets", "extra"], "gpuportal secrets: error: unrecognized arguments: extra"),
    ],
)
def test_an_unknown_flag_is_named_with_the_subcommands_own_usage(capsys, argv, named):
    err = _usage_error(capsys, *argv)
    assert named in err
    assert f"usage: gpuportal {argv[0]} " in err


def test_an_id_is_taken_as_list_shows_it_whatever_its_case(capsys, monkeypatch):
    """Uppercase pasted from elsewhere is the same id; it reaches the portal (unreachable here: exit 3)."""
    assert main(["cancel", " 0123ABCD "]) == 3
    assert "cannot reach the portal" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags", [["--interval", "inf"], ["--interval", "1e308"], ["--interval", "0"], ["--interval", "-1"],
              ["--timeout", "-3"], ["--timeout", "nan"], ["--timeout", "abc"]],
)  # fmt: skip
def test_wait_takes_a_sensible_number_of_seconds(capsys, flags):
    """`--interval inf` was a traceback (time.sleep overflowed), `--interval 0` polled as fast as the portal answered and
    `--timeout -3` or `nan` silently waited forever."""
    err = _usage_error(capsys, "wait", "0123abcd", *flags)
    assert f"gpuportal wait: error: argument {flags[0]}" in err


@pytest.mark.parametrize("nodes", [[], ["--nodes", "1"]])
@pytest.mark.parametrize("topology", ["required", "preferred"])
def test_topology_without_several_nodes_is_a_usage_error(capsys, nodes, topology):
    """`submit --topology required` without `--nodes` was sent, and the portal dropped the topology silently."""
    err = _usage_error(
        capsys,
        "submit",
        "--image",
        "docker.io/x:1",
        "--gpu-type",
        "p100",
        *nodes,
        "--topology",
        topology,
        "--",
        "python",
    )
    assert "gpuportal submit: error: argument --topology: only a job on several nodes" in err
    assert "--nodes N" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["-o", "json", "ssh-config"],
        ["--json", "ssh", "0123abcd"],
        ["-o", "json", "ssh-proxy", "0123abcd"],
        ["-o", "json", "logs", "--follow", "0123abcd"],
        ["logs", "0123abcd", "-f", "--json"],
    ],
)
def test_json_where_a_command_can_only_print_text_is_a_usage_error(capsys, argv):
    """These print ssh_config text, an SSH session or a stream of log lines: with -o json they printed that
    text anyway, which a script's JSON reader refuses. Said before any request, exit 2."""
    err = _usage_error(capsys, *argv)
    assert "-o json" in err
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["secrets", "delete", "wandb"], "gpuportal secret-delete wandb"),
        (["secrets", "rm", "wandb", "--team", "vision"], "gpuportal secret-delete wandb --team vision"),
        (["secrets", "set", "wandb"], "gpuportal secret-set wandb"),
        (["members", "remove", "tom"], "gpuportal members-remove tom"),
        (["members", "add", "nina", "--role", "manager"], "gpuportal members-add nina --role manager"),
        (["members", "role", "nina", "manager"], "gpuportal members-role nina manager"),
    ],
)
def test_a_verb_after_secrets_or_members_is_told_the_command_that_does_it(capsys, argv, hint):
    """`gpuportal secrets delete NAME` (as git, gh and kubectl word it) said only "unrecognized arguments":
    the command that does it is `secret-delete`, and the error says so, with the same arguments."""
    err = _usage_error(capsys, *argv)
    assert f"unrecognized arguments: {argv[1]}" in err
    assert f"did you mean `{hint}`?" in err


def test_every_argument_of_every_command_says_what_it_is(capsys):
    """`gpuportal wait --help` listed `uid` with nothing beside it, and `--team TEAM` said nothing on 15
    commands: a newcomer reading --help learnt neither what to give nor in what form."""
    import argparse

    from cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    silent = {
        name: [a.dest for a in sub._actions if not a.help and not isinstance(a, argparse._HelpAction)]
        for name, sub in commands.items()
    }
    assert {name: dests for name, dests in silent.items() if dests} == {}


def test_wait_help_says_what_its_exit_codes_mean(capsys):
    with pytest.raises(SystemExit):
        main(["wait", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit 0 if it succeeded, 1 if it ended otherwise, 4 if --timeout ran out" in text
    assert "UID column of `gpuportal list`" in text


def test_list_takes_states_comma_separated_as_well_as_repeated(capsys, monkeypatch):
    """`gpuportal list --state running,queued` (as kubectl and gh take lists) was sent as one state
    'RUNNING,QUEUED', which the portal refused."""
    from cli.client import PortalClient

    asked = {}
    monkeypatch.setattr(PortalClient, "workloads", lambda self, **filters: asked.update(filters) or iter([]))
    assert main(["list", "--state", "running,queued", "--state", "Failed", "-o", "json"]) == 0
    assert asked["state"] == ["RUNNING", "QUEUED", "FAILED"]
    assert capsys.readouterr().out.strip() == "[]"
