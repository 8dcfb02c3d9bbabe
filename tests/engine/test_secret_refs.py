"""Secret references in a submission (check_secret_refs) and their rendering: names and
secretKeyRefs only, never a value."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient

from jobs.kube import objects
from jobs.policy import visible_env
from jobs.services.validation import SubmissionInvalid, check_secret_refs, validate_submission
from tests.engine.test_objects import spec
from tests.engine.test_validation import facts

AVAILABLE = {"wandb": "secret-u1234abcd-wandb", "hf": "secret-team-hf"}


def refs(value, env_names=()):
    checked = check_secret_refs(value, AVAILABLE, set(env_names))
    errors: dict[str, list[str]] = {}
    for field, message in checked.problems:
        errors.setdefault(field, []).append(message)
    return checked.value, errors


def test_names_and_env_variables_resolve_to_kubernetes_secrets():
    clean, errors = refs([{"name": "wandb", "env": "WANDB_API_KEY"}, "hf"])
    assert errors == {}
    assert clean == (("wandb", "secret-u1234abcd-wandb", "WANDB_API_KEY"), ("hf", "secret-team-hf", ""))


@pytest.mark.parametrize(
    ("value", "env_names", "fragment"),
    [
        ([{"name": "nope"}], (), "No secret named 'nope'"),
        (["wandb", "wandb"], (), "given twice"),
        ([{"name": "wandb", "env": "TOKEN"}], ("TOKEN",), "clashes"),
        ([{"name": "wandb", "env": "X"}, {"name": "hf", "env": "X"}], (), "clashes"),
        ([{"name": "wandb", "env": "GPUPORTAL_X"}], (), "set by the portal"),
        ([{"name": "wandb", "env": "1BAD"}], (), "not a valid variable name"),
        ([{"name": "wandb", "value": "x"}], (), "Each item"),
        ("wandb", (), "A list"),
    ],
)
def test_bad_references_are_refused_naming_the_secrets_field(value, env_names, fragment):
    _, errors = refs(value, env_names)
    assert list(errors) == ["secrets"]
    assert fragment in " ".join(errors["secrets"])


def test_submission_keeps_only_references():
    raw = {"image": "nvidia/cuda:12.2.0-base", "gpu_type": "p100", "secrets": [{"name": "wandb", "env": "K"}]}
    clean = validate_submission(raw, facts(secrets=AVAILABLE))
    assert clean.secrets == (("wandb", "secret-u1234abcd-wandb", "K"),)
    with pytest.raises(SubmissionInvalid) as refused:
        validate_submission(raw, facts())
    assert list(refused.value.errors) == ["secrets"]


def test_secrets_render_as_secret_key_refs_and_one_read_only_projected_volume():
    secrets = (
        objects.SecretRef("wandb", "secret-u1234abcd-wandb", "WANDB_API_KEY"),
        objects.SecretRef("hf", "secret-team-hf"),
    )
    pod = ApiClient().sanitize_for_serialization(objects.make_pod_template(spec(secrets=secrets)))["spec"]
    container = pod["containers"][0]
    assert container["env"][1] == {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "secret-u1234abcd-wandb", "key": "value"}},
    }
    assert container["volumeMounts"][-1] == {
        "name": "portal-secrets",
        "mountPath": "/var/run/secrets/gpuportal",
        "readOnly": True,
    }
    assert pod["volumes"][-1] == {
        "name": "portal-secrets",
        "projected": {
            "sources": [
                {"secret": {"name": "secret-u1234abcd-wandb", "items": [{"key": "value", "path": "wandb"}]}},
                {"secret": {"name": "secret-team-hf", "items": [{"key": "value", "path": "hf"}]}},
            ]
        },
    }


def test_secret_object_carries_the_value_only_in_string_data():
    secret = objects.make_secret(namespace="ns", name="secret-team-hf", value="s3cr3t", team_slug="v", instance="ci")
    body = ApiClient().sanitize_for_serialization(secret)
    assert body["stringData"] == {"value": "s3cr3t"}
    assert body["type"] == "Opaque"


class _W:
    def __init__(self, owner_id):
        self.owner_id = owner_id
        self.env = [{"name": "TOKEN", "value": "abc"}]


class _U:
    def __init__(self, id, is_superuser=False):
        self.id, self.is_superuser = id, is_superuser
        self.is_authenticated = self.is_active = True


def test_plain_env_values_are_the_owners_teammates_see_names():
    assert visible_env(_U(1), _W(1)) == [{"name": "TOKEN", "value": "abc"}]
    assert visible_env(_U(2), _W(1)) == [{"name": "TOKEN", "value": None}]
    assert visible_env(None, _W(1)) == [{"name": "TOKEN", "value": None}]


def test_datasets_must_exist_and_be_allowed_for_the_team():
    allowed = {"imagenet": True, "private": False}
    raw = {"image": "nvidia/cuda:12.2.0-base", "gpu_type": "p100", "datasets": ["imagenet"]}
    assert validate_submission(raw, facts(datasets=allowed)).datasets == ("imagenet",)
    for value, fragment in ((["private"], "may not use"), (["nope"], "No dataset"), ("imagenet", "A list")):
        with pytest.raises(SubmissionInvalid) as refused:
            validate_submission({**raw, "datasets": value}, facts(datasets=allowed))
        assert list(refused.value.errors) == ["datasets"]
        assert fragment in refused.value.errors["datasets"][0]


def test_a_dataset_mount_renders_read_only():
    from jobs.services.storage.workspaces import volume_specs

    mounts = [{"kind": "dataset", "name": "imagenet", "mount_path": "/datasets/imagenet", "claim": "imagenet-pvc",
               "nfs_server": "", "nfs_path": "", "read_only": True, "size_gib": None}]  # fmt: skip
    pod = ApiClient().sanitize_for_serialization(objects.make_pod_template(spec(volumes=volume_specs(mounts))))["spec"]
    assert pod["volumes"][1] == {
        "name": "ds-0",
        "persistentVolumeClaim": {"claimName": "imagenet-pvc", "readOnly": True},
    }
    assert pod["containers"][0]["volumeMounts"][1] == {
        "name": "ds-0",
        "mountPath": "/datasets/imagenet",
        "readOnly": True,
    }


def test_pod_size_from_the_default_up_to_the_types_limit():
    from tests.engine.test_validation import GpuTypeFacts

    types = {"p100": GpuTypeFacts("p100", "Tesla P100", True, quota=4, largest_node=4, max_cuda=None,
                                  cpu_per_gpu=4000, max_cpu_per_gpu=8000, memory_per_gpu=16384,
                                  max_memory_per_gpu=65536)}  # fmt: skip
    raw = {"image": "nvidia/cuda:12.2.0-base", "gpu_type": "p100", "gpu_count": 2}
    clean = validate_submission({**raw, "cpu_millicores": 16000, "memory_mib": 131072}, facts(gpu_types=types))
    assert (clean.cpu_millicores, clean.memory_mib) == (16000, 131072)
    for field_name, value in (
        ("cpu_millicores", 16001),
        ("memory_mib", 131073),
        ("memory_mib", 100),
        ("cpu_millicores", "x"),
    ):
        with pytest.raises(SubmissionInvalid) as refused:
            validate_submission({**raw, field_name: value}, facts(gpu_types=types))
        assert list(refused.value.errors) == [field_name]


def test_a_sized_pod_requests_what_was_asked():
    pod = ApiClient().sanitize_for_serialization(
        objects.make_pod_template(spec(cpu_millicores=12000, memory_mib=65536))
    )
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "12000m"
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "65536Mi"
    assert pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "32768Mi"


def test_a_private_registry_image_references_its_pull_secret():
    pod = ApiClient().sanitize_for_serialization(objects.make_pod_template(spec(image_pull_secrets=("pull-x",))))
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull-x"}]
    assert "imagePullSecrets" not in ApiClient().sanitize_for_serialization(objects.make_pod_template(spec()))["spec"]


def test_pull_secret_is_a_docker_config_for_the_registry():
    import base64
    import json

    secret = objects.make_pull_secret(namespace="ns", name="pull-x", registry="registry.lab:5000", username="u",
                                      password="p")  # fmt: skip
    body = ApiClient().sanitize_for_serialization(secret)
    assert body["type"] == "kubernetes.io/dockerconfigjson"
    auths = json.loads(body["stringData"][".dockerconfigjson"])["auths"]
    assert auths == {"registry.lab:5000": {"username": "u", "password": "p", "auth": base64.b64encode(b"u:p").decode()}}
