"""One small check per field of a submission (jobs.services.validation.check_*), each a pure function
from the raw value to Checked(value, problems); every problem names its field."""

from __future__ import annotations

import pytest

from jobs.services import validation as v
from jobs.services.validation import Checked, ImageChoice
from tests.engine.test_validation import facts

FACTS = facts()
P100, K2, V100, OLD = (FACTS.gpu_types[s] for s in ("p100", "k2", "v100", "old"))
CUDA_IMAGE, NOTEBOOK, RETIRED = (FACTS.catalog[i] for i in (1, 2, 3))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, Checked("batch")),
        ("", Checked("batch")),
        ("service", Checked("service")),
        ("cron", Checked("batch", (("kind", v.CHOOSE_KIND),))),
    ],
)
def test_check_kind(raw, expected):
    assert v.check_kind(raw) == expected


@pytest.mark.parametrize(
    ("catalog_id", "image", "kind", "expected"),
    [
        (1, "", "batch", Checked(ImageChoice("nvidia/cuda:12.2.0-base", CUDA_IMAGE))),
        ("1", "", "batch", Checked(ImageChoice("nvidia/cuda:12.2.0-base", CUDA_IMAGE))),
        (None, "ubuntu:24.04", "batch", Checked(ImageChoice("ubuntu:24.04", None))),
        # A custom reference that names a catalog entry takes its defaults.
        (None, "jupyter/notebook:1", "service", Checked(ImageChoice("jupyter/notebook:1", NOTEBOOK))),
        (None, "", "batch", Checked(ImageChoice("", None), (("image", v.CHOOSE_IMAGE),))),
        (None, 7, "batch", Checked(ImageChoice("", None), (("image", v.CHOOSE_IMAGE),))),
        (None, "UPPER/x", "batch", Checked(ImageChoice("UPPER/x", None), (("image", v.NOT_A_REFERENCE),))),
        (
            None,
            "quay.io/x/y:1",
            "batch",
            Checked(
                ImageChoice("quay.io/x/y:1", None),
                (("image", "Images from quay.io are not allowed here (allowed registries: docker.io, nvcr.io)."),),
            ),
        ),
        (99, "", "batch", Checked(ImageChoice("", None), (("catalog_image", "No such image in the catalog."),))),
        (
            99,
            "ubuntu",
            "batch",
            Checked(ImageChoice("ubuntu", None), (("catalog_image", "No such image in the catalog."),)),
        ),
        (
            3,
            "",
            "batch",
            Checked(
                ImageChoice("retired/image:1", RETIRED),
                (("catalog_image", "This catalog image is no longer offered."),),
            ),
        ),
        (
            2,
            "",
            "batch",
            Checked(
                ImageChoice("jupyter/notebook:1", NOTEBOOK),
                (("catalog_image", "This image is meant for service workloads, not batch."),),
            ),
        ),
        (
            1,
            "ubuntu",
            "batch",
            Checked(
                ImageChoice("nvidia/cuda:12.2.0-base", CUDA_IMAGE),
                (("image", "Give either a catalog image or a custom image reference, not both."),),
            ),
        ),
    ],
)
def test_check_image(catalog_id, image, kind, expected):
    assert v.check_image(catalog_id, image, kind=kind, facts=FACTS) == expected


@pytest.mark.parametrize(
    ("raw", "image", "expected"),
    [
        ("train-1", "x", Checked("train-1")),
        ("", "nvcr.io/nvidia/pytorch:24.01-py3", Checked("pytorch")),
        ("", "docker.io/lab/3d-unet@sha256:" + "a" * 64, Checked("w-3d-unet")),
        ("", "", Checked("workload")),
        ("a" * 41, "x", Checked("a" * 41, (("name", "At most 40 characters."),))),
        ("Train", "x", Checked("Train", (("name", v.NAME_RULE),))),
        ("train-", "x", Checked("train-", (("name", v.NAME_RULE),))),
        (5, "ubuntu", Checked("ubuntu", (("name", "Must be text."),))),
    ],
)
def test_check_name(raw, image, expected):
    assert v.check_name(raw, image=image) == expected


@pytest.mark.parametrize(
    ("slug", "expected"),
    [
        ("p100", Checked(P100)),
        ("", Checked(None, (("gpu_type", v.CHOOSE_GPU_TYPE),))),
        ("h100", Checked(None, (("gpu_type", "Unknown GPU type 'h100'."),))),
        (["p100"], Checked(None, (("gpu_type", "Unknown GPU type ['p100']."),))),
        ("old", Checked(OLD, (("gpu_type", "Old GPUs are currently disabled."),))),
        ("v100", Checked(V100, (("gpu_type", "Your team has no quota for Tesla V100 GPUs."),))),
    ],
)
def test_check_gpu_type(slug, expected):
    assert v.check_gpu_type(slug, FACTS.gpu_types) == expected


NO_NODE = v.GpuTypeFacts("p100", "Tesla P100", True, quota=4, largest_node=0, max_cuda=None)


@pytest.mark.parametrize(
    ("raw", "gpu", "expected"),
    [
        (2, P100, Checked(2)),
        ("3", P100, Checked(3)),
        (0, P100, Checked(0, (("gpu_count", v.AT_LEAST_ONE_GPU),))),
        ("two", P100, Checked(0, (("gpu_count", v.WHOLE_NUMBER), ("gpu_count", v.AT_LEAST_ONE_GPU)))),
        (True, P100, Checked(0, (("gpu_count", v.WHOLE_NUMBER), ("gpu_count", v.AT_LEAST_ONE_GPU)))),
        (5, P100, Checked(5, (("gpu_count", "Your team's quota for Tesla P100 is 4 GPUs."),))),
        (6, K2, Checked(6)),
        (1, NO_NODE, Checked(1, (("gpu_count", "No ready Tesla P100 node is in the cluster right now."),))),
        (99, None, Checked(99)),  # the type is wrong already: its limits are not judged
        (99, V100, Checked(99)),
    ],
)
def test_check_gpu_count(raw, gpu, expected):
    assert v.check_gpu_count(raw, gpu) == expected


def test_check_gpu_count_names_the_largest_node():
    small = v.GpuTypeFacts("k2", "GRID K2", True, quota=8, largest_node=2, max_cuda=None)
    assert v.check_gpu_count(3, small).problems == (("gpu_count", "The largest GRID K2 node has 2 GPUs."),)


@pytest.mark.parametrize(
    ("catalog", "gpu", "fits"),
    [
        (CUDA_IMAGE, P100, True),
        (CUDA_IMAGE, K2, False),
        (NOTEBOOK, K2, True),
        (None, K2, True),
        (CUDA_IMAGE, None, True),
    ],
)
def test_check_cuda_fit(catalog, gpu, fits):
    checked = v.check_cuda_fit(catalog, gpu, FACTS.gpu_types)
    assert checked.problems == () if fits else [f for f, _ in checked.problems] == ["image"]


@pytest.mark.parametrize(
    ("raw", "default", "expected"),
    [
        (None, ("python",), Checked(("python",))),
        ("", (), Checked(())),
        (["a", "b c"], ("python",), Checked(("a", "b c"))),
        (
            "python train.py",
            (),
            Checked((), (("args", "A list of strings (each one argument; no shell parsing is done)."),)),
        ),
        ([1], (), Checked((), (("args", "A list of strings (each one argument; no shell parsing is done)."),))),
        (["x"] * 257, (), Checked(("x",) * 257, (("args", "At most 256 items."),))),
        (
            ["a\x00b", "x" * 5000],
            (),
            Checked(("a\x00b", "x" * 5000), (("args", "Items may not contain NUL characters."),)),
        ),
        (["x" * 4097], (), Checked(("x" * 4097,), (("args", "Each item may be at most 4096 characters."),))),
    ],
)
def test_check_arguments(raw, default, expected):
    assert v.check_arguments(raw, "args", default) == expected


def test_check_command_total():
    assert v.check_command_total(("x" * 4000,) * 4, ("y" * 4000,) * 4) == Checked(None)
    assert v.check_command_total(("x" * 4096,) * 4, ("y" * 4096,) * 5).problems == (
        ("args", "Command and arguments together may be at most 32 KiB."),
    )


@pytest.mark.parametrize(
    ("raw", "value", "messages"),
    [
        (None, (), []),
        ({"A": "1", "B": 2}, (("A", "1"), ("B", "2")), []),
        ([{"name": "A", "value": "1"}], (("A", "1"),), []),
        ("A=1", (), ['A mapping of NAME to value, or a list of {"name": ..., "value": ...}.']),
        ({f"V{i}": "" for i in range(101)}, (), ["At most 100 variables."]),
        ({"1A": "x"}, (), ["'1A' is not a valid variable name (letters, digits, '_'; not starting with a digit)."]),
        ({"CUDA_VISIBLE_DEVICES": "0"}, (), ["CUDA_VISIBLE_DEVICES is set by the portal and cannot be overridden."]),
        ({"GPUPORTAL_X": "0"}, (), ["GPUPORTAL_X is set by the portal and cannot be overridden."]),
        ([{"name": "A"}, {"name": "A"}], (("A", ""),), ["A is given twice."]),
        ({"A": True}, (), ["The value of A must be text."]),
        ({"A": "x" * 4097}, (), ["The value of A is longer than 4 KiB."]),
        ({"A": "a\x00"}, (), ["The value of A contains a NUL character."]),
        (
            {f"V{i}": "x" * 4000 for i in range(5)},
            tuple((f"V{i}", "x" * 4000) for i in range(5)),
            ["All variables together may be at most 16 KiB."],
        ),
    ],
)
def test_check_env(raw, value, messages):
    checked = v.check_env(raw)
    assert checked.value == value
    assert checked.problems == tuple(("env", m) for m in messages)


@pytest.mark.parametrize(
    ("raw", "value", "messages"),
    [
        (None, (), []),
        (["imagenet"], ("imagenet",), []),
        ("imagenet", (), ["A list of dataset names."]),
        (["x"] * 17, (), ["At most 16 datasets."]),
        # A typo named nothing to pick instead: a scripting team has no list of datasets but this answer.
        (["imagenett"], (), ["No dataset named 'imagenett'. Your team may use: coco, imagenet."]),
        (["private"], (), ["Your team may not use the dataset private; ask an admin."]),
        (["imagenet", "imagenet"], ("imagenet",), ["imagenet is given twice."]),
    ],
)
def test_check_datasets(raw, value, messages):
    checked = v.check_datasets(raw, {"imagenet": True, "private": False, "coco": True})
    assert checked == Checked(value, tuple(("datasets", m) for m in messages))


def test_a_dataset_name_for_a_team_that_may_use_none_says_so():
    checked = v.check_datasets(["imagenet"], {"private": False})
    assert checked.problems == (("datasets", "No dataset named 'imagenet'. Your team may use none; ask an admin."),)


SIZED = v.GpuTypeFacts(
    "p100", "Tesla P100", True, quota=4, largest_node=4, max_cuda=None, cpu_per_gpu=2000, max_cpu_per_gpu=8000,
    memory_per_gpu=8192, max_memory_per_gpu=32768,
)  # fmt: skip


# A type without a larger size offers one size only: "Between 4000 and 4000 millicores" said it badly.
ONE_SIZE = v.GpuTypeFacts(
    "p100", "Tesla P100", True, quota=4, largest_node=4, max_cuda=None, cpu_per_gpu=4000, max_cpu_per_gpu=None,
    memory_per_gpu=16384, max_memory_per_gpu=None,
)  # fmt: skip
ONE_SIZE_SAYS = "Exactly 4000 millicores for 1 Tesla P100 GPU(s), or leave it empty: this GPU type has one size."


@pytest.mark.parametrize(
    ("raw", "gpu", "count", "expected"),
    [
        ({}, SIZED, 1, Checked((None, None))),
        ({"cpu_millicores": 16000, "memory_mib": "16384"}, SIZED, 2, Checked((16000, 16384))),
        (
            {"cpu_millicores": 16001},
            SIZED,
            2,
            Checked((16001, None), (("cpu_millicores", "Between 4000 and 16000 millicores for 2 Tesla P100 GPU(s)."),)),
        ),
        (
            {"memory_mib": 100},
            SIZED,
            1,
            Checked((None, 100), (("memory_mib", "Between 8192 and 32768 MiB for 1 Tesla P100 GPU(s)."),)),
        ),
        ({"cpu_millicores": 99999}, ONE_SIZE, 1, Checked((99999, None), (("cpu_millicores", ONE_SIZE_SAYS),))),
        ({"cpu_millicores": "lots"}, SIZED, 1, Checked((None, None), (("cpu_millicores", v.WHOLE_NUMBER),))),
        ({"cpu_millicores": 1}, None, 1, Checked((1, None))),  # the type is wrong: its limits are not judged
        ({"cpu_millicores": 1}, SIZED, 0, Checked((1, None))),
    ],
)
def test_check_pod_size(raw, gpu, count, expected):
    assert v.check_pod_size(raw, gpu, count) == expected


@pytest.mark.parametrize(
    ("raw", "kind", "catalog", "expected"),
    [
        (None, "batch", None, Checked(None)),
        (8080, "service", None, Checked(8080)),
        ("8080", "service", None, Checked(8080)),
        (None, "service", NOTEBOOK, Checked(8888)),
        (None, "batch", NOTEBOOK, Checked(None)),
        (None, "service", None, Checked(None, (("port", v.SERVICE_NEEDS_PORT),))),
        (0, "service", None, Checked(None, (("port", v.PORT_RANGE),))),
        (65536, "batch", None, Checked(None, (("port", v.PORT_RANGE),))),
        (8080, "batch", None, Checked(None, (("port", v.BATCH_HAS_NO_PORT),))),
    ],
)
def test_check_port(raw, kind, catalog, expected):
    assert v.check_port(raw, kind=kind, catalog=catalog) == expected


@pytest.mark.parametrize(
    ("raw", "kind", "expected"),
    [
        (None, "batch", Checked(86400)),
        ("", "service", Checked(28800)),
        (60, "batch", Checked(60)),
        (7 * 86400, "batch", Checked(7 * 86400)),
        (59, "batch", Checked(59, (("time_limit_seconds", "Between 1 minute(s) and 7 day(s)."),))),
        (
            7 * 86400 + 1,
            "batch",
            Checked(7 * 86400 + 1, (("time_limit_seconds", "Between 1 minute(s) and 7 day(s)."),)),
        ),
        ("an hour", "batch", Checked(0, (("time_limit_seconds", "Must be a whole number of seconds."),))),
    ],
)
def test_check_time_limit(raw, kind, expected):
    assert v.check_time_limit(raw, kind=kind, facts=FACTS) == expected


@pytest.mark.parametrize(
    ("raw", "may", "expected"),
    [
        (None, False, Checked(0)),
        (0, False, Checked(0)),
        (100, True, Checked(100)),
        (-100, True, Checked(-100)),
        (101, True, Checked(0, (("priority", v.PRIORITY_RANGE),))),
        ("high", True, Checked(0, (("priority", v.PRIORITY_RANGE),))),
        (5, False, Checked(5, (("priority", v.MANAGERS_SET_PRIORITY),))),
    ],
)
def test_check_priority(raw, may, expected):
    assert v.check_priority(raw, may_set_priority=may) == expected


@pytest.mark.parametrize(
    ("raw", "kind", "expected"),
    [
        (None, "batch", Checked(False)),
        (True, "batch", Checked(True)),
        ("yes", "batch", Checked(False, (("restartable", "true or false."),))),
        (True, "service", Checked(True, (("restartable", v.RESTARTABLE_SERVICE),))),
        (False, "service", Checked(False)),
    ],
)
def test_check_restartable(raw, kind, expected):
    assert v.check_restartable(raw, kind=kind) == expected


def test_check_root_budget_and_unknown_fields():
    needs_root = v.CatalogFacts(9, "lab/root:1", "any", True, None, needs_root=True)
    assert [f for f, _ in v.check_root(needs_root).problems] == ["image"]
    assert v.check_root(
        v.CatalogFacts(9, "lab/root:1", "any", True, None, needs_root=True, root_allowed=True)
    ) == Checked(None)
    assert v.check_budget(facts(budget_exhausted=True)).problems == (("team", v.BUDGET_USED),)
    assert v.check_budget(FACTS) == Checked(None)
    assert v.check_unknown_fields({"image": "x", "gpus": 2, "zzz": 1}).problems == (
        ("gpus", "Unknown field."),
        ("zzz", "Unknown field."),
    )
