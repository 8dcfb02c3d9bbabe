"""Every rule of a submission, each rejection naming its field (pure: no database)."""

from __future__ import annotations

import pytest

from jobs.services.validation import (
    CatalogFacts,
    Facts,
    GpuTypeFacts,
    SubmissionInvalid,
    parse_image_reference,
    validate_submission,
)


def facts(**overrides) -> Facts:
    base = {
        "gpu_types": {
            "p100": GpuTypeFacts("p100", "Tesla P100", True, quota=4, largest_node=4, max_cuda="12.2"),
            "k2": GpuTypeFacts("k2", "GRID K2", True, quota=8, largest_node=8, max_cuda="11.4"),
            "v100": GpuTypeFacts("v100", "Tesla V100", True, quota=None, largest_node=8, max_cuda="12.4"),
            "old": GpuTypeFacts("old", "Old", False, quota=2, largest_node=2, max_cuda=None),
        },
        "catalog": {
            1: CatalogFacts(1, "nvidia/cuda:12.2.0-base", "batch", True, "12.2", ("nvidia-smi",)),
            2: CatalogFacts(2, "jupyter/notebook:1", "service", True, None, (), (), 8888),
            3: CatalogFacts(3, "retired/image:1", "any", False, None),
        },
        "allowed_registries": frozenset({"docker.io", "nvcr.io"}),
    }
    base.update(overrides)
    return Facts(**base)


def errors_of(raw, **fact_overrides) -> dict[str, list[str]]:
    with pytest.raises(SubmissionInvalid) as caught:
        validate_submission(raw, facts(**fact_overrides))
    return caught.value.errors


def test_a_good_batch_submission_gets_defaults_from_the_catalog():
    clean = validate_submission({"catalog_image": 1, "gpu_type": "p100", "gpu_count": 2}, facts())
    assert clean.image == "nvidia/cuda:12.2.0-base"
    assert clean.command == ("nvidia-smi",)
    assert clean.kind == "batch"
    assert clean.name == "cuda"
    assert clean.time_limit_seconds == 86400


def test_a_service_takes_the_catalog_port():
    clean = validate_submission({"catalog_image": 2, "kind": "service", "gpu_type": "k2"}, facts())
    assert clean.port == 8888


@pytest.mark.parametrize(
    ("raw", "field", "fragment"),
    [
        ({"gpu_type": "p100"}, "image", "Choose an image"),
        ({"image": "UPPER/case", "gpu_type": "p100"}, "image", "Not a valid image reference"),
        ({"image": "evil.example.com/x:1", "gpu_type": "p100"}, "image", "evil.example.com are not allowed"),
        ({"catalog_image": 99, "gpu_type": "p100"}, "catalog_image", "No such image"),
        ({"catalog_image": 3, "gpu_type": "p100"}, "catalog_image", "no longer offered"),
        ({"catalog_image": 2, "kind": "batch", "gpu_type": "p100"}, "catalog_image", "meant for service"),
        ({"image": "ubuntu", "gpu_type": "h100"}, "gpu_type", "Unknown GPU type"),
        ({"image": "ubuntu", "gpu_type": "old"}, "gpu_type", "disabled"),
        ({"image": "ubuntu", "gpu_type": "v100"}, "gpu_type", "no quota"),
        ({"image": "ubuntu", "gpu_type": "p100", "gpu_count": 0}, "gpu_count", "At least 1"),
        ({"image": "ubuntu", "gpu_type": "p100", "gpu_count": 5}, "gpu_count", "quota for Tesla P100 is 4"),
        ({"image": "ubuntu", "gpu_type": "p100", "gpu_count": "two"}, "gpu_count", "whole number"),
        ({"image": "ubuntu", "gpu_type": "p100", "kind": "cron"}, "kind", "batch' or 'service"),
        ({"image": "ubuntu", "gpu_type": "p100", "name": "Bad_Name"}, "name", "Lowercase"),
        ({"image": "ubuntu", "gpu_type": "p100", "name": "x" * 41}, "name", "At most 40"),
        ({"image": "ubuntu", "gpu_type": "p100", "command": "python train.py"}, "command", "list of strings"),
        ({"image": "ubuntu", "gpu_type": "p100", "args": ["a" * 5000]}, "args", "4096"),
        ({"image": "ubuntu", "gpu_type": "p100", "env": {"1BAD": "x"}}, "env", "not a valid variable name"),
        ({"image": "ubuntu", "gpu_type": "p100", "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env", "set by the portal"),
        ({"image": "ubuntu", "gpu_type": "p100", "env": {"GPUPORTAL_BASE_URL": "/"}}, "env", "set by the portal"),
        ({"image": "ubuntu", "gpu_type": "p100", "env": {"BIG": "x" * 5000}}, "env", "longer than 4 KiB"),
        ({"image": "ubuntu", "gpu_type": "p100", "env": [{"name": "A"}, {"name": "A"}]}, "env", "given twice"),
        ({"image": "ubuntu", "gpu_type": "p100", "port": 8080}, "port", "Only services"),
        ({"image": "ubuntu", "gpu_type": "p100", "kind": "service"}, "port", "needs the port"),
        ({"image": "ubuntu", "gpu_type": "p100", "kind": "service", "port": 70000}, "port", "between 1 and 65535"),
        ({"image": "ubuntu", "gpu_type": "p100", "time_limit_seconds": 5}, "time_limit_seconds", "Between 1 minute"),
        ({"image": "ubuntu", "gpu_type": "p100", "time_limit_seconds": 10**7}, "time_limit_seconds", "7 day"),
        ({"image": "ubuntu", "gpu_type": "p100", "priority": 5}, "priority", "Only team managers"),
        ({"image": "ubuntu", "gpu_type": "p100", "priority": 500}, "priority", "between -100 and 100"),
        ({"image": "ubuntu", "gpu_type": "p100", "colour": "blue"}, "colour", "Unknown field"),
    ],
)
def test_each_bad_field_is_named(raw, field, fragment):
    errors = errors_of(raw)
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors[field]


def test_a_sweep_members_number_is_the_submitters_to_set():
    # `gpuportal submit --array` sets these under the portal's prefix; the portal sets nothing there.
    env = {"GPUPORTAL_ARRAY_INDEX": "3", "GPUPORTAL_ARRAY_SIZE": "8"}
    clean = validate_submission({"image": "ubuntu", "gpu_type": "p100", "env": env}, facts())
    assert dict(clean.env) == env


def test_a_gpu_count_above_the_largest_node_is_refused():
    types = facts().gpu_types | {"k2": GpuTypeFacts("k2", "GRID K2", True, quota=16, largest_node=8, max_cuda=None)}
    errors = errors_of({"image": "ubuntu", "gpu_type": "k2", "gpu_count": 9}, gpu_types=types)
    assert errors["gpu_count"] == ["The largest GRID K2 node has 8 GPUs."]


def test_no_ready_node_of_the_type_is_a_gpu_count_error():
    types = {"p100": GpuTypeFacts("p100", "Tesla P100", True, quota=4, largest_node=0, max_cuda=None)}
    errors = errors_of({"image": "ubuntu", "gpu_type": "p100"}, gpu_types=types)
    assert "No ready Tesla P100 node" in errors["gpu_count"][0]


def test_an_exhausted_budget_names_the_team():
    errors = errors_of(
        {"image": "ubuntu", "gpu_type": "p100"}, budget_exhausted=True, budget_message="Used 100 of 100."
    )
    assert errors == {"team": ["Used 100 of 100."]}


def test_cuda_fit_names_both_versions_and_the_types_that_work():
    errors = errors_of({"catalog_image": 1, "gpu_type": "k2"})
    (message,) = errors["image"]
    assert "needs CUDA 12.2" in message
    assert "GRID K2 drivers support up to CUDA 11.4" in message
    assert "It runs on: Tesla P100." in message


def test_managers_may_set_priority():
    clean = validate_submission({"image": "ubuntu", "gpu_type": "p100", "priority": 10}, facts(may_set_priority=True))
    assert clean.priority == 10


def test_several_errors_are_reported_together():
    errors = errors_of({"image": "", "gpu_type": "nope", "gpu_count": -1, "kind": "service", "port": 0})
    assert {"image", "gpu_type", "gpu_count", "port"} <= set(errors)


@pytest.mark.parametrize(
    ("reference", "registry", "name", "tag"),
    [
        ("ubuntu", "docker.io", "ubuntu", None),
        ("nvidia/cuda:12.2.0-base-ubuntu22.04", "docker.io", "nvidia/cuda", "12.2.0-base-ubuntu22.04"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", "nvidia/pytorch", "24.01-py3"),
        ("registry.lab:5000/team/model", "registry.lab:5000", "team/model", None),
        ("localhost/x", "localhost", "x", None),
        (f"ghcr.io/a/b@sha256:{'a' * 64}", "ghcr.io", "a/b", None),
    ],
)
def test_image_references_parse(reference, registry, name, tag):
    parsed = parse_image_reference(reference)
    assert parsed is not None
    assert (parsed.registry, parsed.name, parsed.tag) == (registry, name, tag)


@pytest.mark.parametrize("reference", ["", "UPPER", "a//b", "a:", ":tag", "a b", "-a", "a@sha256:xyz", "x" * 300])
def test_bad_image_references_are_refused(reference):
    assert parse_image_reference(reference) is None


ROOT_IMAGES = {
    4: CatalogFacts(4, "docker.io/lab/apt-at-start:1", "batch", True, None, needs_root=True),
    5: CatalogFacts(5, "docker.io/lab/approved-root:1", "batch", True, None, needs_root=True, root_allowed=True),
}


@pytest.mark.parametrize("raw", [{"catalog_image": 4}, {"image": "docker.io/lab/apt-at-start:1"}])
def test_an_image_that_needs_root_is_refused_on_image_until_an_admin_allows_it(raw):
    errors = errors_of({**raw, "gpu_type": "p100"}, catalog=ROOT_IMAGES)
    assert list(errors) == ["image"]
    assert "needs to run as root" in errors["image"][0]


def test_an_image_that_needs_root_and_is_allowed_is_accepted():
    clean = validate_submission({"catalog_image": 5, "gpu_type": "p100"}, facts(catalog=ROOT_IMAGES))
    assert clean.catalog_image_id == 5
