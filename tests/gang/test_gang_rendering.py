"""A gang job's objects are pure functions of its spec: one Job per rank, one rank per node, torchrun's
variables, and the user's command passed to a fixed wrapper as arguments (never pasted into a shell)."""

from __future__ import annotations

import subprocess

from hypothesis import given
from hypothesis import strategies as st

from jobs.kube import gang_objects, names, objects
from tests.engine.test_objects import spec

GANG = "0123abcdef-0"


def gang_spec(**overrides) -> objects.WorkloadSpec:
    gang = overrides.pop("gang", objects.GangSpec(nodes=2, master_port=29500, wait_seconds=300))
    return spec(gang=gang, gpu_count=4, **overrides)


def env_of(job: dict) -> dict[str, object]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_one_job_per_rank_named_by_rank_and_held_one_per_node():
    made = gang_objects.render(gang_spec())
    assert [o["kind"] for o in made] == ["Job", "Job"]
    assert [o["metadata"]["name"] for o in made] == ["train-resnet-0123abcdef-r0", "train-resnet-0123abcdef-r1"]
    for rank, job in enumerate(made):
        assert job["spec"]["backoffLimit"] == 0
        assert job["spec"]["parallelism"] == 1
        pod = job["spec"]["template"]
        assert pod["metadata"]["labels"][names.LABEL_GANG] == GANG
        assert pod["metadata"]["labels"][names.LABEL_RANK] == str(rank)
        assert pod["spec"]["restartPolicy"] == "Never"
        # Each rank asks for the GPUs of one node, not the gang's.
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert pod["spec"]["affinity"] == {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {names.LABEL_GANG: GANG}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }


def test_a_requeued_attempt_gets_new_names_and_its_own_gang_label():
    made = gang_objects.render(gang_spec(attempt=2))
    assert made[1]["metadata"]["name"] == "train-resnet-0123abcdef-2-r1"
    assert made[1]["metadata"]["labels"][names.LABEL_GANG] == "0123abcdef-2"


def test_torchrun_variables_on_every_rank():
    for rank, job in enumerate(gang_objects.render(gang_spec())):
        env = env_of(job)
        assert env["WORLD_SIZE"] == "2"
        assert env["NODE_RANK"] == str(rank)
        assert env["NPROC_PER_NODE"] == "4"
        assert env["MASTER_PORT"] == "29500"
        assert env["GPUPORTAL_NODE_RANK"] == str(rank)
        assert env["GPUPORTAL_WORKLOAD"] == "0123abcdef"


def test_without_dns_rank0_reads_its_own_ip_and_the_others_wait_for_it_through_the_wrapper():
    rank0, rank1 = gang_objects.render(gang_spec())
    assert env_of(rank0)["MASTER_ADDR"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    c0 = rank0["spec"]["template"]["spec"]["containers"][0]
    assert (c0["command"], c0["args"]) == (["python", "train.py"], ["--epochs", "3"])
    c1 = rank1["spec"]["template"]["spec"]["containers"][0]
    assert "MASTER_ADDR" not in env_of(rank1)
    assert c1["command"] == ["/bin/sh", "-c", gang_objects.WAIT_FOR_MASTER, "gpuportal-rank"]
    assert c1["args"] == ["python", "train.py", "--epochs", "3"]  # the user's words, as arguments
    volume = next(v for v in rank1["spec"]["template"]["spec"]["volumes"] if v["name"] == gang_objects.GANG_VOLUME)
    assert volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == (
        f"metadata.annotations['{names.ANNOTATION_MASTER_ADDR}']"
    )


def test_with_dns_rank0_has_a_stable_name_under_a_headless_service():
    made = gang_objects.render(gang_spec(gang=objects.GangSpec(nodes=3, cluster_dns=True)))
    service, rank0, *others = made
    assert service["kind"] == "Service"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {names.LABEL_GANG: GANG, names.LABEL_RANK: "0"}
    assert rank0["spec"]["template"]["spec"]["hostname"] == "rank-0"
    assert rank0["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    for job in (rank0, *others):
        assert env_of(job)["MASTER_ADDR"] == f"rank-0.{service['metadata']['name']}.gpuportal-vision.svc"
        assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "train.py"]


def test_topology_label_becomes_pod_affinity_required_or_preferred():
    required = gang_objects.render(
        gang_spec(gang=objects.GangSpec(nodes=2, topology_key="example.com/rack", topology_required=True))
    )[0]["spec"]["template"]["spec"]["affinity"]["podAffinity"]
    assert required == {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {names.LABEL_GANG: GANG}}, "topologyKey": "example.com/rack"}
        ]
    }
    preferred = gang_objects.render(gang_spec(gang=objects.GangSpec(nodes=2, topology_key="example.com/rack")))[0]
    term = preferred["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term[0]["weight"] == 100
    assert term[0]["podAffinityTerm"]["topologyKey"] == "example.com/rack"


def test_a_single_node_job_renders_as_before():
    assert gang_objects.render(spec()) == objects.make_objects(spec())


def run_wrapper(tmp_path, address: str, words: list[str], wait: str = "5"):
    script = gang_objects.WAIT_FOR_MASTER.replace(gang_objects.GANG_DIR, str(tmp_path))
    (tmp_path / gang_objects.MASTER_ADDR_FILE).write_text(address)
    env = {"PATH": "/usr/bin:/bin", "NODE_RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500",
           "GPUPORTAL_GANG_WAIT_SECONDS": wait}  # fmt: skip
    # Bytes, not text: universal newlines would turn a user's "\r" into "\n" and hide what the shell did.
    done = subprocess.run(["/bin/sh", "-c", script, "gpuportal-rank", *words], env=env, capture_output=True,
                          timeout=30, check=False)  # fmt: skip
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
                min_size=1, max_size=4))  # fmt: skip
def test_the_wrapper_passes_any_user_words_through_untouched(tmp_path_factory, words):
    tmp_path = tmp_path_factory.mktemp("gang")
    done = run_wrapper(tmp_path, "10.1.2.3", ["/usr/bin/printf", "%s|", "$MASTER_ADDR", *words])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(f"{w}|" for w in ["$MASTER_ADDR", *words])


def test_the_wrapper_exports_master_addr_and_gives_up_when_it_never_comes(tmp_path):
    done = run_wrapper(tmp_path, "10.1.2.3", ["/bin/sh", "-c", 'echo "$MASTER_ADDR:$MASTER_PORT"'])
    assert done.stdout.strip() == "10.1.2.3:29500"
    never = run_wrapper(tmp_path, "", ["/bin/true"], wait="1")
    assert never.returncode == gang_objects.NO_MASTER_EXIT
    assert "gave up waiting for rank 0's address" in never.stderr
