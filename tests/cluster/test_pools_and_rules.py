"""Fast unit tests (no cluster): the pools file and the simulator's rule resolution are pure functions."""

from __future__ import annotations

import math

import pytest

from localcluster.kubelet import node_labels, node_status
from localcluster.pools import DEFAULT_POOLS_FILE, PoolsError, SimulatorConfig, load_pools, parse_pools
from localcluster.rules import image_fails, parse_seconds, resolve_plan, restart_backoff

SIM = SimulatorConfig()


def _pod(restart="Never", annotations=None, env=None, image="nvidia/cuda:12.2.0"):
    container = {
        "name": "main",
        "image": image,
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    return {
        "metadata": {"annotations": annotations or {}},
        "spec": {"restartPolicy": restart, "containers": [container]},
    }


def test_default_pools_match_the_issue():
    config = load_pools(DEFAULT_POOLS_FILE)
    summary = [(p.gputype, p.nodes, p.gpus_per_node) for p in config.pools]
    assert summary == [("p100", 2, 4), ("k2", 2, 8), ("v100", 1, 8)]
    assert config.node_count == 5
    assert config.simulator.failing_images == ("*.invalid/*", "*:does-not-exist")
    assert config.simulator.default_batch_run_seconds == 20


def test_pool_defaults_and_node_names():
    config = parse_pools({"pools": [{"gputype": "a100", "nodes": 2, "gpus_per_node": 8}]})
    pool = config.pools[0]
    assert pool.name == "a100"
    assert pool.node_names() == ["gpu-a100-1", "gpu-a100-2"]
    assert (pool.cuda_major, pool.cuda_minor) == ("12", "2")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "non-empty `pools:` list"),
        ({"pools": [{"gputype": "P100"}]}, "lowercase"),
        ({"pools": [{"gputype": "p100", "nodes": -1}]}, "pools[0].nodes"),
        ({"pools": [{"gputype": "p100", "memory": "lots"}]}, "not a Kubernetes quantity"),
        ({"pools": [{"gputype": "p100", "cuda_driver": "12"}]}, "MAJOR.MINOR"),
        ({"pools": [{"gputype": "p100", "colour": "red"}]}, "unknown key"),
        ({"pools": [{"gputype": "p100"}, {"gputype": "p100"}]}, "duplicate pool"),
        ({"pools": [{"gputype": "p100"}], "simulator": {"failing_images": "x"}}, "failing_images"),
    ],
)
def test_malformed_pools_are_named(data, message):
    with pytest.raises(PoolsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_pools(data, source="t.yaml")


def test_unreadable_pools_file(tmp_path):
    with pytest.raises(PoolsError, match="cannot read"):
        load_pools(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("pools: [\n")
    with pytest.raises(PoolsError, match="not valid YAML"):
        load_pools(tmp_path / "bad.yaml")


def test_node_carries_gpu_capacity_and_gfd_labels():
    pool = load_pools(DEFAULT_POOLS_FILE).pools[0]
    labels = node_labels("gpu-p100-1", pool)
    assert labels["gputype"] == "p100"
    assert labels["nvidia.com/cuda.driver.major"] == "12"
    assert labels["nvidia.com/cuda.driver.minor"] == "2"
    assert labels["nvidia.com/gpu.count"] == "4"
    status = node_status(pool, 10250, 0.0)
    assert status["allocatable"]["nvidia.com/gpu"] == "4"
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]


def test_defaults_batch_runs_and_exits_zero_services_run_forever():
    batch = resolve_plan(_pod("Never"), SIM)
    assert (batch.run_seconds, batch.exit_code, batch.reason) == (20.0, 0, "Completed")
    assert not batch.restarts_after_exit()
    assert resolve_plan(_pod("OnFailure"), SIM).run_seconds == 20.0
    service = resolve_plan(_pod("Always"), SIM)
    assert service.runs_forever
    assert service.start_seconds == pytest.approx(0.2)


def test_annotations_win_over_env_which_win_over_defaults():
    plan = resolve_plan(
        _pod(
            annotations={"sim.gpuportal.dev/run-seconds": "3", "sim.gpuportal.dev/exit-code": "4"},
            env={"SIM_RUN_SECONDS": "9", "SIM_EXIT_CODE": "7", "SIM_START_SECONDS": "2"},
        ),
        SIM,
    )
    assert (plan.run_seconds, plan.exit_code, plan.reason, plan.start_seconds) == (3.0, 4, "Error", 2.0)


def test_oomkilled_outcome_is_exit_137():
    plan = resolve_plan(_pod(env={"SIM_OUTCOME": "OOMKilled"}), SIM)
    assert (plan.exit_code, plan.reason) == (137, "OOMKilled")
    service = resolve_plan(_pod("Always", annotations={"sim.gpuportal.dev/outcome": "OOMKilled"}), SIM)
    assert not service.runs_forever
    assert service.restarts_after_exit()


def test_failing_images_and_outcome_errimagepull():
    assert resolve_plan(_pod(image="registry.invalid/a/b:1"), SIM).pull_failure_image == "registry.invalid/a/b:1"
    assert resolve_plan(_pod(image="nvidia/cuda:does-not-exist"), SIM).pull_failure_image
    assert resolve_plan(_pod(), SIM).pull_failure_image is None
    forced = resolve_plan(_pod(annotations={"sim.gpuportal.dev/outcome": "ErrImagePull"}), SIM)
    assert forced.pull_failure_image == "nvidia/cuda:12.2.0"
    assert image_fails("a.invalid/x", ["*.invalid/*"])
    assert not image_fails("docker.io/x", ["*.invalid/*"])


def test_malformed_rule_values_fall_back_to_defaults():
    plan = resolve_plan(
        _pod(annotations={"sim.gpuportal.dev/run-seconds": "soon", "sim.gpuportal.dev/exit-code": "x"}), SIM
    )
    assert (plan.run_seconds, plan.exit_code) == (20.0, 0)
    assert resolve_plan(_pod(annotations={"sim.gpuportal.dev/exit-code": "999"}), SIM).exit_code == 255


def test_service_with_an_exit_code_crashes_after_the_default_run():
    plan = resolve_plan(_pod("Always", env={"SIM_EXIT_CODE": "1"}), SIM)
    assert (plan.run_seconds, plan.exit_code) == (20.0, 1)
    assert plan.restarts_after_exit()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3", 3.0),
        ("2.5", 2.5),
        ("90s", 90.0),
        ("2m", 120.0),
        ("500ms", 0.5),
        ("forever", math.inf),
        ("-1", math.inf),
    ],
)
def test_parse_seconds(text, seconds):
    assert parse_seconds(text, allow_forever=True) == seconds


def test_start_seconds_cannot_be_forever():
    with pytest.raises(ValueError, match="not allowed"):
        parse_seconds("forever", allow_forever=False)


def test_restart_backoff_doubles_and_caps():
    assert [restart_backoff(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
