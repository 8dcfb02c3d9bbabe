"""Browser tests that need no cluster: Debian's chromium, driven by Playwright, against the live portal."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from jobs.models import GpuNode, State, Workload
from tests.ui.conftest import PASSWORD, make_workload, screenshot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sign_in_and_out(page, world):
    page.goto("/workloads/")
    expect(page).to_have_url("/login/?next=/workloads/")
    page.get_by_label("Username").fill("olivia")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("didn't match")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="My workloads")).to_be_visible()
    page.goto("/")
    expect(page.get_by_role("heading", name="Lab's GPU quota")).to_be_visible()
    expect(page.get_by_text("Nothing running.")).to_be_visible()
    screenshot(page, "sign_in_dashboard")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_bad_input_shows_each_fields_error_with_the_form_kept(page, world):
    sign_in(page, "olivia")
    page.get_by_role("link", name="Launch", exact=True).click()
    page.get_by_label("Image", exact=True).select_option(label="Custom image…")
    expect(page.get_by_label("Custom image")).to_be_visible()
    page.get_by_label("Custom image").fill("quay.io/someone/thing:1")
    page.get_by_label("Name", exact=True).fill("Bad_Name!")
    page.get_by_label("GPU type").select_option("p100")
    page.get_by_label("GPUs", exact=True).fill("5")
    # The outlook judges the form as Launch will: everything wrong so far, before Launch is pressed.
    expect(page.locator("#outlook")).to_contain_text("quota for Tesla P100 is 2 GPUs")
    expect(page.locator("#outlook")).to_contain_text("quay.io are not allowed")
    page.get_by_label("Variable name").first.fill("NVIDIA_VISIBLE_DEVICES")
    page.get_by_label("Value").first.fill("all")
    page.get_by_role("button", name="Launch", exact=True).click()

    summary = page.locator("#error-summary")
    expect(summary).to_be_focused()
    expect(page.locator("#id_name_error")).to_contain_text("Lowercase letters")
    expect(page.locator("#id_image_error")).to_contain_text("quay.io are not allowed")
    expect(page.locator("#id_gpu_count_error")).to_contain_text("quota for Tesla P100 is 2 GPUs")
    expect(page.locator("#env-errors")).to_contain_text("NVIDIA_VISIBLE_DEVICES is set by the portal")
    # What was typed is still there.
    expect(page.get_by_label("Name", exact=True)).to_have_value("Bad_Name!")
    expect(page.get_by_label("Custom image")).to_have_value("quay.io/someone/thing:1")
    expect(page.get_by_label("GPUs", exact=True)).to_have_value("5")
    expect(page.get_by_label("Variable name").first).to_have_value("NVIDIA_VISIBLE_DEVICES")
    expect(page.get_by_label("Name", exact=True)).to_have_attribute("aria-invalid", "true")
    screenshot(page, "launch_bad_input")
    assert not Workload.objects.exists()


def test_an_outsider_gets_404_for_another_teams_workload(page, world):
    workload = make_workload(world, name="secret-run")
    sign_in(page, "xavier")
    response = page.goto(f"/workloads/{workload.uid}/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("secret-run")
    screenshot(page, "outsider_404")


def test_catalog_image_fills_defaults_and_env_rows(page, world):
    sign_in(page, "olivia")
    page.goto("/launch/")
    image = page.get_by_label("Image", exact=True)
    image.select_option(label="Python 3.12")
    expect(page.locator("#catalog-description")).to_contain_text("Plain Python for quick batch scripts.")
    expect(page.get_by_label("Command")).to_have_value("python -c")
    expect(page.get_by_label("Arguments")).to_have_value("\"print('hello from a GPU')\"")
    expect(page.get_by_label("Batch job")).to_be_checked()
    expect(page.locator("#port-field")).to_be_hidden()
    expect(page.locator("#custom-image-field")).to_be_hidden()
    expect(page.get_by_label("Copies")).to_be_visible()
    page.get_by_label("Copies").fill("5")  # the outlook counts every copy (quota 2 of each type)
    expect(page.locator("#outlook")).to_contain_text("2 of the 5 copies fit your team's quota now")
    image.select_option(label="Jupyter notebook")
    expect(page.get_by_label("Service")).to_be_checked()
    expect(page.get_by_label("Port")).to_have_value("8888")
    expect(page.locator("#copies-field")).to_be_hidden()  # a service runs once
    # Environment rows: add two, remove one.
    page.get_by_role("button", name="Add variable").click()
    expect(page.get_by_label("Variable name")).to_have_count(2)
    expect(page.get_by_label("Variable name").nth(1)).to_be_focused()
    page.get_by_role("button", name="Remove variable").nth(1).click()
    expect(page.get_by_label("Variable name")).to_have_count(1)
    screenshot(page, "launch_catalog_defaults")


BESIDE = """(id) => {
  const box = document.getElementById(id).getBoundingClientRect();
  const label = document.querySelector(`label[for=${id}]`).getBoundingClientRect();
  const gap = label.left - box.right;
  const centres = Math.abs((label.top + label.height / 2) - (box.top + box.height / 2));
  return gap >= 0 && gap < 16 && centres < 6 ? "beside" : `gap ${gap}px, centres ${centres}px apart`;
}"""


@pytest.mark.parametrize("width", [1280, 375])
def test_the_launch_forms_checkboxes_sit_beside_their_labels(page, world, width):
    """Issue 32: "Shared with my team" and "Restartable" sat apart from their labels."""
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "olivia")
    page.goto("/launch/")
    page.get_by_label("Image", exact=True).select_option(label="Python 3.12")
    page.wait_for_load_state("networkidle")
    assert page.evaluate(BESIDE, "id_restartable") == "beside"
    page.locator("label[for=id_restartable]").click()
    expect(page.get_by_role("checkbox", name="Restartable")).to_be_checked()
    page.get_by_label("Image", exact=True).select_option(label="Jupyter notebook")
    page.wait_for_load_state("networkidle")
    assert page.evaluate(BESIDE, "id_shared_with_team") == "beside"
    screenshot(page, f"launch_checkboxes_{width}")


def test_the_outlook_says_what_launch_would_refuse_before_launch(page, world):
    """Issue 32: PyTorch (CUDA 11.8) on Grid K2 (drivers up to CUDA 11.4) read "All 3 copies fit your
    team's quota" and was refused only after Launch."""
    GpuNode.objects.filter(gpu_type=world.k2).update(cuda_driver_version="11.4")
    GpuNode.objects.filter(gpu_type=world.p100).update(cuda_driver_version="12.2")
    world.trainer.title, world.trainer.cuda_version = "PyTorch (CUDA 11.8)", "11.8"
    world.trainer.save()
    sign_in(page, "olivia")
    page.goto("/launch/")
    page.get_by_label("Image", exact=True).select_option(label="PyTorch (CUDA 11.8)")
    page.get_by_label("Copies").fill("3")
    expect(page.locator("#outlook")).to_contain_text("2 of the 3 copies fit")
    page.get_by_label("GPU type").select_option("k2")
    outlook = page.locator("#outlook")
    expect(outlook).to_contain_text("Launch would refuse this as it stands")
    expect(outlook).to_contain_text("needs CUDA 11.8, but Grid K2 drivers support up to CUDA 11.4")
    expect(outlook).not_to_contain_text("fit your team's quota")
    screenshot(page, "launch_outlook_refuses_cuda")
    page.get_by_label("GPU type").select_option("p100")
    expect(outlook).to_contain_text("2 of the 3 copies fit your team's quota now")


def test_a_clone_that_launch_would_refuse_says_so_when_the_form_opens(page, world):
    """The outlook judges the form as it first opens too: a clone of a workload whose image the GPU type's
    drivers no longer run (they were replaced) says so before anything is touched."""
    GpuNode.objects.filter(gpu_type=world.k2).update(cuda_driver_version="11.4")
    world.trainer.cuda_version = "11.8"
    world.trainer.save()
    source = make_workload(world, name="old-run", catalog_image=world.trainer, image=world.trainer.reference,
                           gpu_type=world.k2, state=State.SUCCEEDED)  # fmt: skip
    sign_in(page, "olivia")
    page.goto(f"/launch/?clone={source.uid}")
    expect(page.locator("#outlook")).to_contain_text("needs CUDA 11.8, but Grid K2 drivers support up to CUDA 11.4")


def test_told_before_and_after_submitting_that_it_waits_for_quota(page, world):
    # The team's two P100 GPUs are held (rows as the engine leaves them while jobs run).
    make_workload(world, state=State.RUNNING, gpu_count=2)
    sign_in(page, "olivia")
    page.goto("/launch/")
    page.get_by_label("Image", exact=True).select_option(label="Python 3.12")
    page.get_by_label("GPU type").select_option("p100")
    expect(page.locator("#outlook")).to_contain_text("This will wait for quota.")
    expect(page.locator("#outlook")).to_contain_text("about #1 in the queue")
    page.get_by_label("Name", exact=True).fill("waits-its-turn")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("waits for your team's Tesla P100 quota: #1 in the queue")
    expect(page.locator("#state-badge")).to_contain_text("Queued #1")
    expect(page.locator(".why")).to_contain_text("The team uses 2 of 2 GPUs")
    screenshot(page, "queued_position")


def test_the_launch_page_logs_no_error_in_the_console(page, world, settings):
    """Typing in GPUs while an outlook was on its way made htmx abort it (hx-sync replace), and htmx logs an
    aborted request as errors: "htmx:afterRequest", "htmx:sendAbort", and a failed request in the network log."""
    settings.GANG_TOPOLOGY_LABEL = "topology.kubernetes.io/zone"
    said: list[str] = []
    page.on("console", lambda m: said.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: said.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: said.append(f"requestfailed: {r.url} {r.failure}"))
    sign_in(page, "olivia")
    page.goto("/launch/")
    page.wait_for_load_state("networkidle")
    page.get_by_label("Batch job").check()
    page.get_by_label("GPUs", exact=True).press_sequentially("12", delay=50)  # faster than an outlook comes back
    page.get_by_label("Nodes", exact=True).fill("2")
    page.get_by_label("Keep the nodes together").select_option("required")
    page.get_by_label("Service").check()
    page.get_by_label("GPU type").select_option("p100")
    page.get_by_label("GPUs", exact=True).fill("1")
    page.wait_for_load_state("networkidle")
    expect(page.locator("#outlook")).to_contain_text("Tesla P100")
    assert said == []
