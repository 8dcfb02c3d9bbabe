"""Rendering is a pure function; the objects are compared whole with what Kubernetes should receive."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client import ApiClient

from jobs.kube import names, objects

P100 = objects.GpuTypeSpec("p100", "gputype", "p100", "nvidia.com/gpu", 4000, 16384)


def spec(**overrides) -> objects.WorkloadSpec:
    base = {
        "uid": "0123abcdef",
        "name": "train-resnet",
        "kind": "batch",
        "team_slug": "vision",
        "username": "alice",
        "namespace": "gpuportal-vision",
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "gpu_type": P100,
        "gpu_count": 2,
        "time_limit_seconds": 3600,
        "command": ("python", "train.py"),
        "args": ("--epochs", "3"),
        "env": (("EPOCHS", "3"),),
        "instance": "ci",
    }
    base.update(overrides)
    return objects.WorkloadSpec(**base)


def as_dict(obj):
    return ApiClient().sanitize_for_serialization(obj)


LABELS = {
    "app.kubernetes.io/managed-by": "gpuportal",
    "gpuportal.dev/instance": "ci",
    "gpuportal.dev/workload": "0123abcdef",
    "gpuportal.dev/team": "vision",
    "gpuportal.dev/user": "alice",
    "gpuportal.dev/gpu-type": "p100",
    "gpuportal.dev/kind": "batch",
}


def test_batch_job_renders_exactly():
    assert as_dict(objects.make_job(spec())) == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train-resnet-0123abcdef", "namespace": "gpuportal-vision", "labels": LABELS},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 3600,
            "completions": 1,
            "parallelism": 1,
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"gputype": "p100"},
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "runAsGroup": 1000,
                        "fsGroup": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "terminationGracePeriodSeconds": 30,
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16384Mi"}}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                            "command": ["python", "train.py"],
                            "args": ["--epochs", "3"],
                            "env": [
                                {"name": "EPOCHS", "value": "3"},
                                {"name": "GPUPORTAL_WORKLOAD", "value": "0123abcdef"},
                            ],
                            "resources": {
                                "requests": {
                                    "nvidia.com/gpu": "2",
                                    "cpu": "8000m",
                                    "memory": "32768Mi",
                                    "ephemeral-storage": "1024Mi",
                                },
                                "limits": {"nvidia.com/gpu": "2", "memory": "32768Mi", "ephemeral-storage": "20480Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "privileged": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                        }
                    ],
                },
            },
        },
    }


def test_an_admin_allowed_root_image_renders_without_run_as_non_root_but_keeps_the_rest():
    pod = as_dict(objects.make_job(spec(run_as_root=True)))["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_read_only_root_image_gets_a_writable_tmp_beside_its_mounts():
    volume = objects.VolumeSpec(name="home", mount_path="/home/alice", claim_name="ws-alice")
    pod = as_dict(objects.make_job(spec(read_only_root=True, volumes=(volume,))))["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "home", "mountPath": "/home/alice"},
    ]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_scratch_disk_is_requested_and_capped_per_gpu_type():
    a100 = objects.GpuTypeSpec("a100", "gputype", "a100", "nvidia.com/gpu", 8000, 65536, 4096, 10240)
    resources = as_dict(objects.make_container(spec(gpu_type=a100)))["resources"]
    assert resources["requests"]["ephemeral-storage"] == "4096Mi"
    assert resources["limits"]["ephemeral-storage"] == "10240Mi"


def test_service_renders_a_recreate_deployment_and_a_cluster_ip_service():
    service_spec = spec(kind="service", port=8888, command=(), args=())
    deployment, service = (as_dict(o) for o in objects.make_objects(service_spec))
    assert deployment["kind"] == "Deployment"
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["selector"] == {"matchLabels": {"gpuportal.dev/workload": "0123abcdef"}}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Always"
    assert pod["containers"][0]["ports"] == [{"containerPort": 8888, "name": "http"}]
    # Ready (an address the proxy dials) only once the program accepts connections on its port.
    assert pod["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": "http"}
    assert "command" not in pod["containers"][0]
    assert service["spec"] == {
        "type": "ClusterIP",
        "selector": {"gpuportal.dev/workload": "0123abcdef"},
        "ports": [{"name": "http", "port": 8888, "targetPort": 8888, "protocol": "TCP"}],
    }


def test_resource_quota_mirrors_team_quota_per_resource_with_cpu_and_memory():
    caps = objects.NamespaceCaps(gpus_by_resource={"nvidia.com/gpu": 12}, cpu_millicores=48000, memory_mib=196608)
    quota = as_dict(objects.make_resource_quota("gpuportal-vision", caps))
    assert quota["spec"] == {
        "hard": {
            "requests.nvidia.com/gpu": "12",
            "requests.cpu": "48000m",
            "requests.memory": "196608Mi",
            "limits.memory": "196608Mi",
        }
    }


def test_object_names_are_valid_and_deterministic():
    name = names.object_name("My Fancy_Experiment!!" * 5, "0123abcdef")
    assert name == names.object_name("My Fancy_Experiment!!" * 5, "0123abcdef")
    assert len(name) <= 63
    assert name.endswith("-0123abcdef")
    assert name[0].isalpha()
    assert all(c.isalnum() or c == "-" for c in name)
    assert names.object_name("123", "0123abcdef").startswith("w-123")


def test_label_values_keep_distinct_inputs_distinct():
    long_a, long_b = "x" * 70 + "a", "x" * 70 + "b"
    assert names.label_value(long_a) != names.label_value(long_b)
    assert len(names.label_value(long_a)) <= 63
    assert names.label_value("alice@example.org") != names.label_value("alice_example.org")


MODEL = {"Job": "V1Job", "Deployment": "V1Deployment", "Service": "V1Service"}
words = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
volumes = st.builds(
    objects.VolumeSpec,
    name=words,
    mount_path=words.map(lambda w: f"/data/{w}"),
    read_only=st.booleans(),
    claim_name=st.sampled_from(["", "home-alice"]),
    nfs_server=st.just("nfs.example.org"),
    nfs_path=st.just("/exports/x"),
)
workload_specs = st.builds(
    spec,
    kind=st.sampled_from(["batch", "service"]),
    port=st.integers(1, 65535),
    gpu_count=st.integers(0, 8),
    command=st.lists(st.text(max_size=12), max_size=3).map(tuple),
    args=st.lists(st.text(max_size=12), max_size=3).map(tuple),
    env=st.lists(st.tuples(words.map(str.upper), st.text(max_size=12)), max_size=3).map(tuple),
    volumes=st.lists(volumes, max_size=3).map(tuple),
    secrets=st.lists(st.builds(objects.SecretRef, words, words, st.sampled_from(["", "TOKEN"])), max_size=2).map(tuple),
    image_pull_secrets=st.sampled_from([(), ("pull-registry",)]),
    cpu_millicores=st.one_of(st.none(), st.integers(100, 64000)),
    memory_mib=st.one_of(st.none(), st.integers(64, 500000)),
    run_as_root=st.booleans(),
    read_only_root=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(workload=workload_specs)
def test_rendered_objects_are_exactly_what_the_clients_models_send(workload):
    """The workload's objects go to the API server as rendered dicts: every key is a field the client's
    models know under its API name, every value of the type they take, and none is None (a round trip
    through the models, which drop unknown keys, refuse wrong types and leave out None, changes nothing)."""
    api = ApiClient()
    for obj in objects.make_objects(workload):
        model = api.deserialize(json.dumps(obj), MODEL[obj["kind"]], "application/json")
        assert api.sanitize_for_serialization(model) == obj
        assert json.loads(json.dumps(obj)) == obj  # plain JSON: what the create sends is what was rendered


def test_a_batch_job_has_no_readiness_probe():
    (job,) = (as_dict(o) for o in objects.make_objects(spec()))
    assert "readinessProbe" not in job["spec"]["template"]["spec"]["containers"][0]
