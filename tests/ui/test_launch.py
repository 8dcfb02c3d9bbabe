"""The launch form: defaults from the catalog, submitting, errors next to each field with the form kept,
the quota outlook before and after submitting, and Clone."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import AllowedRegistry, CatalogImage, GpuNode, State, Workload
from jobs.services.submission.intake import copies_of
from jobs.services.validation import MAX_NAME, default_name
from tests.ui.conftest import make_workload

pytestmark = pytest.mark.django_db


def post(client, **fields):
    data = {
        "name": "",
        "kind": "batch",
        "catalog_image": "",
        "image": "",
        "gpu_type": "p100",
        "gpu_count": "1",
        "command": "",
        "args": "",
        "env_name": [],
        "env_value": [],
        "port": "",
        "time_limit": "1",
        "time_limit_unit": "hours",
    }
    data.update(fields)
    return client.post(reverse("launch"), data)


def field_errors(response) -> dict[str, list[str]]:
    form = response.context["form"]
    errors = {name: [str(e) for e in errs] for name, errs in form.errors.items()}
    if form.env_errors:
        errors["env"] = list(form.env_errors)
    return errors


def test_form_offers_catalog_with_descriptions_and_gpu_types_with_room(login, world):
    page = login(world.owner).get(reverse("launch")).content.decode()
    assert "Plain Python for quick batch scripts." in page
    assert 'data-description="A notebook server on port 8888."' in page
    assert 'data-port="8888"' in page
    assert "Tesla P100 — 3 of 4 free in the cluster · quota left 2 of 2" in page
    assert "Custom image…" in page
    assert 'data-outlook="now"' in page


def test_a_batch_job_from_the_catalog_is_submitted(login, world):
    client = login(world.owner)
    response = post(
        client,
        catalog_image=str(world.trainer.id),
        name="train-1",
        args="\"print('hi there')\"",
        env_name=["SIM_RUN_SECONDS", ""],
        env_value=["5", ""],
        time_limit="30",
        time_limit_unit="minutes",
    )
    workload = Workload.objects.get(name="train-1")
    assert response.status_code == 302
    assert response["Location"] == reverse("workload_detail", args=[workload.uid])
    assert workload.state == State.QUEUED
    assert workload.owner == world.owner
    assert workload.team == world.team
    assert workload.image == world.trainer.reference
    assert workload.args == ["print('hi there')"]
    assert workload.env == [{"name": "SIM_RUN_SECONDS", "value": "5"}]
    assert workload.time_limit_seconds == 1800
    page = client.get(response["Location"]).content.decode()
    assert "train-1 was submitted." in page


def test_a_service_with_a_custom_image(login, world):
    client = login(world.owner)
    response = post(client, kind="service", image="docker.io/library/nginx:1.27", port="80", gpu_type="k2")
    assert response.status_code == 302
    workload = Workload.objects.get()
    assert (workload.kind, workload.port, workload.gpu_type, workload.catalog_image) == ("service", 80, world.k2, None)


def test_bad_input_shows_each_fields_error_and_keeps_the_form(login, world):
    client = login(world.owner)
    response = post(
        client,
        name="Bad_Name!",
        image="quay.io/someone/thing:1",
        gpu_count="5",
        command="python -c 'unbalanced",
        env_name=["NVIDIA_VISIBLE_DEVICES", "OK"],
        env_value=["all", "1"],
    )
    assert response.status_code == 400
    # The form's own parsing catches the command first; nothing else is judged until it parses.
    assert "Could not split this into arguments" in field_errors(response)["command"][0]
    page = response.content.decode()
    assert 'value="Bad_Name!"' in page
    assert "python -c &#x27;unbalanced" in page

    response = post(
        client,
        name="Bad_Name!",
        image="quay.io/someone/thing:1",
        gpu_count="5",
        command="python train.py",
        env_name=["NVIDIA_VISIBLE_DEVICES", "OK"],
        env_value=["all", "1"],
        time_limit="10",
        time_limit_unit="days",
    )
    assert response.status_code == 400
    errors = field_errors(response)
    assert "Lowercase letters" in errors["name"][0]
    assert "quay.io are not allowed" in errors["image"][0]
    assert "quota for Tesla P100 is 2 GPUs" in errors["gpu_count"][0]
    assert "NVIDIA_VISIBLE_DEVICES is set by the portal" in errors["env"][0]
    assert "Between 1 minute(s) and 7 day(s)" in errors["time_limit"][0]
    page = response.content.decode()
    # Each error sits with its field and the field points at it; what was typed is still there.
    for field in ("name", "image", "gpu_count", "time_limit"):
        assert f'id="id_{field}_error"' in page
    assert 'aria-invalid="true"' in page
    assert 'value="Bad_Name!"' in page
    assert 'value="quay.io/someone/thing:1"' in page
    assert 'value="python train.py"' in page
    assert 'value="NVIDIA_VISIBLE_DEVICES"' in page
    assert 'value="OK"' in page
    assert not Workload.objects.exists()


def test_form_level_errors_name_the_field(login, world):
    response = post(login(world.owner), gpu_count="many", time_limit="soon", port="x", kind="service")
    assert response.status_code == 400
    errors = field_errors(response)
    assert set(errors) >= {"gpu_count", "time_limit", "port"}
    assert 'value="many"' in response.content.decode()


def test_a_service_needs_a_port_and_env_values_need_names(login, world):
    response = post(
        login(world.owner), kind="service", image="docker.io/library/nginx:1", env_name=[""], env_value=["orphan"]
    )
    assert field_errors(response)["env"] == ["Every value needs a variable name."]
    response = post(login(world.owner), kind="service", image="docker.io/library/nginx:1")
    assert "A service needs the port" in field_errors(response)["port"][0]


def test_only_managers_may_set_a_priority(login, world):
    assert 'name="priority"' not in login(world.owner).get(reverse("launch")).content.decode()
    assert 'name="priority"' in login(world.manager).get(reverse("launch")).content.decode()
    post(login(world.manager), image="docker.io/library/python:3", priority="5")
    assert Workload.objects.get().priority == 5


def test_told_before_and_after_submitting_that_it_must_wait_for_quota(login, world):
    make_workload(world, state=State.RUNNING, gpu_count=2)
    make_workload(world, state=State.QUEUED, gpu_count=1)
    client = login(world.owner)
    outlook = client.get(reverse("launch_outlook"), {"gpu_type": "p100", "gpu_count": "1"}).content.decode()
    assert "This will wait for quota." in outlook
    assert "about #2 in the queue" in outlook
    outlook = client.get(reverse("launch_outlook"), {"gpu_type": "k2", "gpu_count": "1"}).content.decode()
    assert 'data-outlook="now"' in outlook
    outlook = client.get(reverse("launch_outlook"), {"gpu_type": "p100", "gpu_count": "2"}).content.decode()
    assert 'data-outlook="wait"' in outlook
    outlook = client.get(reverse("launch_outlook"), {"gpu_type": "p100", "gpu_count": "3"}).content.decode()
    assert "ask for fewer" in outlook

    response = post(client, image="docker.io/library/python:3", name="waits")
    page = client.get(response["Location"]).content.decode()
    assert "waits waits for your team&#x27;s Tesla P100 quota: #2 in the queue" in page
    assert "#2 in the queue" in page


def test_clone_opens_the_form_filled_in(login, world):
    source = make_workload(
        world,
        name="orig",
        kind="service",
        image="docker.io/library/nginx:1.27",
        command=["nginx", "-g", "daemon off;"],
        env=[{"name": "MODE", "value": "fast"}],
        port=8080,
        time_limit_seconds=7200,
        gpu_type=world.k2,
        gpu_count=2,
    )
    page = login(world.teammate).get(reverse("launch"), {"clone": source.uid}).content.decode()
    assert 'value="orig"' in page
    assert 'value="docker.io/library/nginx:1.27"' in page
    assert 'value="nginx -g &quot;daemon off;&quot;"' in page
    assert 'value="MODE"' in page
    # Plain env values are the owner's: a teammate's clone gets the names, the owner's the values too.
    assert 'value="fast"' not in page
    assert 'value="fast"' in login(world.owner).get(reverse("launch"), {"clone": source.uid}).content.decode()
    assert 'value="8080"' in page
    assert '<option value="k2" data-cuda="" data-quota="2" selected>' in page
    assert 'name="time_limit" value="2"' in page
    assert '<option value="hours" selected>' in page


def test_custom_images_are_offered_only_where_a_registry_is_allowed(login, world):
    page = login(world.owner).get(reverse("launch")).content.decode()
    assert "Any image from an allowed registry: docker.io." in page
    AllowedRegistry.objects.all().delete()
    page = login(world.owner).get(reverse("launch")).content.decode()
    assert "Custom image…" not in page
    assert 'name="image"' not in page


def test_the_default_gpu_type_runs_the_images_cuda_version(login, world):
    GpuNode.objects.filter(gpu_type=world.k2).update(cuda_driver_version="11.4")
    GpuNode.objects.filter(gpu_type=world.p100).update(cuda_driver_version="12.2")
    world.notebook.cuda_version = "12.2"  # the first catalog entry by title
    world.notebook.save()
    client = login(world.owner)
    page = client.get(reverse("launch")).content.decode()
    assert '<option value="p100" data-cuda="12.2" data-quota="2" selected>' in page
    assert "CUDA ≤ 11.4" in page
    response = post(client, catalog_image=str(world.notebook.id), kind="service", gpu_type="k2")
    assert "needs CUDA 12.2, but Grid K2 drivers support up to CUDA 11.4" in field_errors(response)["catalog_image"][0]


def test_the_form_says_which_images_need_root_and_refuses_an_unallowed_one(login, world):
    refused = CatalogImage.objects.create(reference="docker.io/lab/apt:1", title="Apt", needs_root=True)
    CatalogImage.objects.create(reference="docker.io/lab/ok:1", title="Blessed", needs_root=True, root_allowed=True)
    client = login(world.owner)
    page = client.get(reverse("launch")).content.decode()
    assert "Apt (needs root, not allowed)</option>" in page
    assert "Blessed (needs root)</option>" in page
    assert 'data-root="refused"' in page
    assert 'data-root="allowed"' in page
    before = Workload.objects.count()
    response = post(client, catalog_image=str(refused.id), name="apt-1")
    assert response.status_code == 400
    assert "needs to run as root" in " ".join(field_errors(response)["catalog_image"])
    assert Workload.objects.count() == before


def test_on_nodes_that_pull_no_images_the_form_refuses_an_image_they_lack_and_names_those_they_have(login, world):
    # The k2 nodes reach no registry (gpuportal.io/pulls-images=false) and hold one image, the catalog's trainer.
    GpuNode.objects.filter(gpu_type=world.k2).update(pulls_images=False, images=["docker.io/library/python:3.12"])
    client = login(world.owner)
    before = Workload.objects.count()
    response = post(client, image="docker.io/library/ubuntu:24.04", gpu_type="k2", command="true")
    assert response.status_code == 400
    assert field_errors(response)["image"] == [
        "The Grid K2 nodes pull no images (they reach no registry), and none of them has "
        "docker.io/library/ubuntu:24.04. Images that run there: Python 3.12 (docker.io/library/python:3.12)."
    ]
    assert Workload.objects.count() == before
    assert post(client, catalog_image=str(world.trainer.id), gpu_type="k2").status_code == 302
    # The p100 nodes pull: the same image is taken there.
    assert post(client, image="docker.io/library/ubuntu:24.04", command="true").status_code == 302


def test_copies_of_names_each_and_tells_them_apart():
    spec = {"name": "", "kind": "batch", "env": [{"name": "LR", "value": "0.1"}]}
    copies = copies_of(spec, 12, base_name="sweep")
    assert [c["name"] for c in copies] == [f"sweep-{i}" for i in range(12)]
    assert copies[11]["env"] == [
        {"name": "LR", "value": "0.1"},
        {"name": "GPUPORTAL_ARRAY_INDEX", "value": "11"},
        {"name": "GPUPORTAL_ARRAY_SIZE", "value": "12"},
    ]
    assert spec["env"] == [{"name": "LR", "value": "0.1"}]  # the form's spec is left as it was
    # A long base is cut so that the longest name still fits, and never ends in '-'.
    long = copies_of(spec, 100, base_name="a" * (MAX_NAME - 3) + "-bcd")
    assert all(len(c["name"]) <= MAX_NAME for c in long)
    assert long[99]["name"] == "a" * (MAX_NAME - 3) + "-99"


def test_copies_of_a_batch_job_are_submitted_together(login, world):
    client = login(world.owner)
    response = post(
        client,
        catalog_image=str(world.trainer.id),
        name="sweep",
        copies="3",
        env_name=["LR"],
        env_value=["0.1"],
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("workload_list") + "?scope=mine"
    stored = list(Workload.objects.order_by("name"))
    assert [w.name for w in stored] == ["sweep-0", "sweep-1", "sweep-2"]
    for index, workload in enumerate(stored):
        assert workload.state == State.QUEUED
        assert workload.owner == world.owner
        assert workload.image == world.trainer.reference
        assert workload.env == [
            {"name": "LR", "value": "0.1"},
            {"name": "GPUPORTAL_ARRAY_INDEX", "value": str(index)},
            {"name": "GPUPORTAL_ARRAY_SIZE", "value": "3"},
        ]
    page = client.get(response["Location"]).content.decode()
    assert "3 copies were submitted, sweep-0 to sweep-2." in page
    assert "sweep-2" in page


def test_unnamed_copies_are_named_after_the_image(login, world):
    response = post(login(world.owner), catalog_image=str(world.trainer.id), copies="2")
    assert response.status_code == 302
    base = default_name(world.trainer.reference)
    assert sorted(Workload.objects.values_list("name", flat=True)) == [f"{base}-0", f"{base}-1"]


def test_copies_are_refused_with_the_field_named_and_nothing_stored(login, world, settings):
    client = login(world.owner)
    # A service's Copies is hidden (a service runs once): what a batch draft left there is left out, below in
    # test_what_a_service_cannot_have_is_left_out_not_judged.
    for count in ("0", "501", "two"):
        response = post(client, catalog_image=str(world.trainer.id), copies=count)
        assert response.status_code == 400
        assert "copies" in field_errors(response), count

    response = post(client, catalog_image=str(world.trainer.id), copies="10", name="n" * MAX_NAME)
    assert response.status_code == 400
    assert f"With 10 copies the name may have at most {MAX_NAME - 2} characters" in field_errors(response)["name"][0]

    # What is wrong with one copy is wrong with all: said once, next to its field.
    response = post(
        client, catalog_image=str(world.trainer.id), copies="4", gpu_count="5", env_name=["CUDA_VISIBLE_DEVICES"],
        env_value=["0"],
    )  # fmt: skip
    assert response.status_code == 400
    errors = field_errors(response)
    assert len(errors["gpu_count"]) == 1
    assert "quota for Tesla P100 is 2 GPUs" in errors["gpu_count"][0]
    assert len(errors["env"]) == 1
    assert "CUDA_VISIBLE_DEVICES is set by the portal" in errors["env"][0]
    assert 'value="4"' in response.content.decode()  # the count typed is kept

    # The queue caps count every copy: more than one may have waiting is refused as a whole.
    settings.PORTAL_MAX_QUEUED_PER_USER = 3
    response = post(client, catalog_image=str(world.trainer.id), copies="4")
    assert response.status_code == 400
    assert "at most 3" in field_errors(response)["copies"][0]
    assert not Workload.objects.exists()


def test_the_outlook_counts_every_copy(login, world):
    client = login(world.owner)

    def outlook(**params) -> str:
        return client.get(reverse("launch_outlook"), {"gpu_type": "p100", "gpu_count": "1", **params}).content.decode()

    # The team's P100 quota is 2, none used.
    assert "All 2 copies fit your team's quota" in outlook(copies="2")
    some = outlook(copies="5")
    assert 'data-outlook="some"' in some
    assert "2 of the 5 copies fit your team's quota now" in some
    assert "The other 3 wait in the queue" in some
    assert "1 of the 3 copies" in outlook(copies="3", gpu_count="2")
    make_workload(world, state=State.RUNNING, gpu_count=2)
    waits = outlook(copies="3")
    assert "These will wait for quota." in waits
    assert "The 3 copies start by themselves" in waits
    # A service runs once, and a count that is not one is left to the form: the outlook is for one.
    assert "This will wait for quota." in outlook(copies="3", kind="service")
    assert "This will wait for quota." in outlook(copies="lots")
    # The page itself, as first shown after a refused post, counts the copies typed.
    page = post(client, catalog_image=str(world.trainer.id), copies="3", name="Bad_Name!").content.decode()
    assert "These will wait for quota." in page


def test_the_outlook_judges_the_form_as_launch_does(login, world):
    """Issue 32: "All 3 copies fit your team's quota" for an image needing CUDA 11.8 on Grid K2 (drivers
    up to 11.4), refused only after Launch. The outlook now runs the submission's own rules on the form."""
    GpuNode.objects.filter(gpu_type=world.k2).update(cuda_driver_version="11.4")
    GpuNode.objects.filter(gpu_type=world.p100).update(cuda_driver_version="12.2")
    world.trainer.cuda_version = "11.8"
    world.trainer.title = "PyTorch (CUDA 11.8)"
    world.trainer.save()
    client = login(world.owner)
    form = {
        "name": "", "kind": "batch", "catalog_image": str(world.trainer.id), "image": "", "gpu_type": "k2",
        "gpu_count": "1", "command": "", "args": "", "env_name": [""], "env_value": [""], "port": "",
        "time_limit": "", "time_limit_unit": "hours", "copies": "3",
    }  # fmt: skip

    def outlook(**fields) -> str:
        return client.post(reverse("launch_outlook"), {**form, **fields}).content.decode()

    refused = outlook()
    assert 'data-outlook="refused"' in refused
    assert "fit your team" not in refused
    assert "Image: This image needs CUDA 11.8, but Grid K2 drivers support up to CUDA 11.4." in refused
    assert "It runs on: Tesla P100." in refused
    # Launch says the same, in the same words.
    launched = post(client, **{k: v for k, v in form.items() if k != "env_name" and k != "env_value"})
    assert launched.status_code == 400
    assert "needs CUDA 11.8, but Grid K2 drivers support up to CUDA 11.4" in field_errors(launched)["catalog_image"][0]
    # On a type whose drivers run it, the quota outlook as before.
    assert "All 2 copies fit your team's quota" in outlook(gpu_type="p100", copies="2")
    # Any rule of the submission, not only CUDA: a variable the portal sets, a bad name.
    refused = outlook(gpu_type="p100", env_name=["NVIDIA_VISIBLE_DEVICES"], env_value=["all"], name="Bad_Name!")
    assert "Environment: NVIDIA_VISIBLE_DEVICES is set by the portal" in refused
    assert "Name: Lowercase letters" in refused
    assert not Workload.objects.exists()


def test_a_mig_slice_type_is_explained_in_words_and_takes_one_per_container(login, world):
    from jobs.models import GpuType, Quota
    from tests.world import Node, node_present

    mig = GpuType.objects.create(
        slug="a100-1g",
        display_name="A100 1g.10gb",
        node_label_value="a100-mig",
        resource_name="nvidia.com/mig-1g.10gb",
        kind="mig",
        share_parts=1,
        share_of=7,
        physical_gpu="A100",
        device_memory_mib=10240,
    )
    node_present(Node("gpu-a100-1", "a100-1g", gpus=7), mig)
    Quota.objects.create(team=world.team, gpu_type=mig, max_gpus=7)
    client = login(world.owner)
    page = client.get(reverse("launch")).content.decode()
    assert "A100 1g.10gb (1/7 of an A100, 10 GB) — 7 of 7 free in the cluster" in page

    response = post(client, gpu_type="a100-1g", gpu_count="2")
    assert response.status_code == 400
    assert field_errors(response)["gpu_count"] == [
        "A100 1g.10gb is a MIG slice: one per container. For more, choose a larger slice or a whole GPU."
    ]
    assert not Workload.objects.filter(gpu_type=mig).exists()


def test_keeping_one_node_together_is_refused_and_a_services_hidden_choice_is_left_out(login, world, settings):
    """Topology on one node was dropped silently; on a service (where the field is hidden) it is not the
    service's choice and must not refuse the launch."""
    settings.GANG_TOPOLOGY_LABEL = "topology.kubernetes.io/zone"
    client = login(world.owner)
    refused = post(client, catalog_image=str(world.trainer.id), nodes="1", topology="required")
    assert refused.status_code == 400
    assert "Only a job on several nodes can keep them together" in " ".join(field_errors(refused)["topology"])
    assert not Workload.objects.exists()

    notebook = post(client, kind="service", catalog_image=str(world.notebook.id), port="8888", topology="required")
    assert notebook.status_code == 302, field_errors(notebook)
    assert Workload.objects.get().topology == ""


def test_what_a_service_cannot_have_is_left_out_not_judged(login, world, settings):
    """A batch draft's Nodes, Copies and topology stay in the form, hidden, when the person switches to Service
    (and a service draft's port when switching to Batch job): they were still sent and judged, so Launch and the
    outlook named a field the person could not see. What the kind cannot have is now left out."""
    settings.GANG_TOPOLOGY_LABEL = "topology.kubernetes.io/zone"
    client = login(world.owner)
    service = {"kind": "service", "catalog_image": str(world.notebook.id), "port": "8888"}
    for hidden in ({"nodes": "2", "topology": "required"}, {"nodes": "0"}, {"copies": "3"}, {"copies": "two"}):
        form = {**service, "gpu_type": "p100", "gpu_count": "1", "time_limit": "1", "time_limit_unit": "hours"}
        text = client.post(reverse("launch_outlook"), {**form, **hidden}).content.decode()
        for label in ("Nodes:", "Copies:", "Keep the nodes together:"):
            assert label not in text, (hidden, text)
        assert 'data-outlook="now"' in text, (hidden, text)
        launched = post(client, **service, **hidden)
        assert launched.status_code == 302, (hidden, field_errors(launched))
    notebooks = Workload.objects.filter(kind="service")
    assert notebooks.count() == 4
    assert {(w.nodes, w.topology) for w in notebooks} == {(1, "")}

    batch = post(client, catalog_image=str(world.trainer.id), port="99999", shared_with_team="on")
    assert batch.status_code == 302, field_errors(batch)
    job = Workload.objects.get(kind="batch")
    assert job.port is None
    assert not job.shared_with_team


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_service_form_hides_the_batch_jobs_retry_settings(page, world):
    """Restartable, Automatic retries, Exit codes to retry and Checkpoints in are a batch job's (a service
    always restarts, and the portal leaves them out of a service's launch): a notebook's form showed them."""
    from playwright.sync_api import expect

    from tests.ui.conftest import sign_in

    sign_in(page, "olivia")
    page.goto("/launch/")
    page.get_by_label("Batch job").check()
    expect(page.get_by_label("Restartable")).to_be_visible()
    expect(page.get_by_label("Automatic retries")).to_be_visible()
    page.get_by_label("Service").check()
    for label in ("Restartable", "Automatic retries", "Exit codes to retry", "Checkpoints in"):
        expect(page.get_by_label(label)).to_be_hidden()
    page.get_by_label("Batch job").check()
    expect(page.get_by_label("Checkpoints in")).to_be_visible()
