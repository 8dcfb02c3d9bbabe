"""The image: a catalog entry or a custom reference from an allowed registry, whether it may run as root,
and whether its CUDA runs on the GPU type's drivers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.services.spec_fields import MAX_IMAGE
from jobs.services.validation.facts import CatalogFacts, Facts, GpuTypeFacts
from jobs.services.validation.outcome import Checked, Problem, is_int, refused

# --- image references (the grammar of OCI/distribution references) ---------------------------------
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
DEFAULT_REGISTRY = "docker.io"

CHOOSE_IMAGE = "Choose an image from the catalog or give an image reference."
NOT_A_REFERENCE = "Not a valid image reference (expected [registry/]name[:tag][@sha256:digest])."


@dataclass(frozen=True)
class ImageReference:
    registry: str
    name: str
    tag: str | None
    digest: str | None


def parse_image_reference(reference: str) -> ImageReference | None:
    """Parse `[registry/]path[:tag][@digest]`; None when it is not a valid reference."""
    if not reference or len(reference) > MAX_IMAGE:
        return None
    match = _REFERENCE.match(reference)
    if match is None or len(match.group("name")) > MAX_IMAGE:
        return None
    domain = match.group("domain")
    name = match.group("name")
    # As docker does: the first component is a registry only if it looks like a host.
    if domain and not ("." in domain or ":" in domain or domain == "localhost" or domain.startswith("[")):
        domain = None
    if domain is None:
        registry = DEFAULT_REGISTRY
    else:
        registry = domain.lower()
        name = name[len(domain) + 1 :]
    if not re.fullmatch(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*", name):
        return None
    return ImageReference(registry=registry, name=name, tag=match.group("tag"), digest=match.group("digest"))


def cuda_tuple(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


@dataclass(frozen=True)
class ImageChoice:
    image: str
    catalog: CatalogFacts | None  # the catalog entry chosen, or the one a custom reference names


def check_image(catalog_id: Any, image: Any, *, kind: str, facts: Facts) -> Checked[ImageChoice]:
    """A catalog entry (by id), or a custom reference from an allowed registry (which may name a
    catalog entry, whose defaults then apply)."""
    if catalog_id not in (None, ""):
        return _catalog_image(catalog_id, image, kind=kind, facts=facts)
    if not isinstance(image, str) or not image:
        return refused(ImageChoice("", None), "image", CHOOSE_IMAGE)
    return _custom_image(image, facts)


def _catalog_image(catalog_id: Any, image: Any, *, kind: str, facts: Facts) -> Checked[ImageChoice]:
    if not is_int(catalog_id) or int(catalog_id) not in facts.catalog:
        # A custom image given beside it is still judged on its own.
        custom = _custom_image(image, facts) if isinstance(image, str) and image else Checked(ImageChoice("", None))
        return Checked(custom.value, (("catalog_image", "No such image in the catalog."), *custom.problems))
    entry = facts.catalog[int(catalog_id)]
    problems: list[Problem] = []
    if not entry.enabled:
        problems.append(("catalog_image", "This catalog image is no longer offered."))
    elif entry.suits not in ("any", kind):
        problems.append(("catalog_image", f"This image is meant for {entry.suits} workloads, not {kind}."))
    if image and image != entry.reference:
        problems.append(("image", "Give either a catalog image or a custom image reference, not both."))
    return Checked(ImageChoice(entry.reference, entry), tuple(problems))


def _custom_image(image: str, facts: Facts) -> Checked[ImageChoice]:
    reference = parse_image_reference(image)
    if reference is None:
        return refused(ImageChoice(image, None), "image", NOT_A_REFERENCE)
    named = next((c for c in facts.catalog.values() if c.reference == image and c.enabled), None)
    if named is not None:
        return Checked(ImageChoice(image, named))
    if reference.registry not in facts.allowed_registries:
        allowed = ", ".join(sorted(facts.allowed_registries)) or "none"
        message = f"Images from {reference.registry} are not allowed here (allowed registries: {allowed})."
        return refused(ImageChoice(image, None), "image", message)
    return Checked(ImageChoice(image, None))


def check_root(catalog: CatalogFacts | None) -> Checked[None]:
    """An image that needs root runs only once an admin allowed its catalog entry; every other workload
    runs as a fixed non-root uid (jobs/kube/objects.py), so there is nothing to check for it."""
    if catalog is not None and catalog.needs_root and not catalog.root_allowed:
        return refused(
            None,
            "image",
            "This image needs to run as root, and an administrator has not allowed that for it. "
            "Choose another image or ask a portal administrator.",
        )
    return Checked(None)


def check_cuda_fit(
    catalog: CatalogFacts | None, gpu: GpuTypeFacts | None, gpu_types: Mapping[str, GpuTypeFacts]
) -> Checked[None]:
    """A catalog image's CUDA version must run on the type's drivers; the message names the types it
    would run on."""
    if catalog is None or not catalog.cuda_version or gpu is None or not gpu.max_cuda:
        return Checked(None)
    needed = cuda_tuple(catalog.cuda_version)
    if needed <= cuda_tuple(gpu.max_cuda):
        return Checked(None)
    fitting = sorted(
        g.display_name
        for g in gpu_types.values()
        if g.enabled and g.quota and g.max_cuda and cuda_tuple(g.max_cuda) >= needed
    )
    hint = f" It runs on: {', '.join(fitting)}." if fitting else " No GPU type here runs it."
    return refused(
        None,
        "image",
        f"This image needs CUDA {catalog.cuda_version}, but {gpu.display_name} drivers support "
        f"up to CUDA {gpu.max_cuda}.{hint}",
    )


# --- images on nodes that pull none -----------------------------------------------------------------
def canonical_image(reference: str) -> str | None:
    """A reference as a node's kubelet lists it in `.status.images`: registry and whole path (docker.io's
    one-part names under `library/`), then `@digest`, else `:tag` (`latest` when none). None when it is
    not a reference."""
    parsed = parse_image_reference(reference)
    if parsed is None:
        return None
    name = parsed.name
    if parsed.registry == DEFAULT_REGISTRY and "/" not in name:
        name = f"library/{name}"
    if parsed.digest:
        return f"{parsed.registry}/{name}@{parsed.digest}"
    return f"{parsed.registry}/{name}:{parsed.tag or 'latest'}"


def _pulled_always(reference: ImageReference) -> bool:
    """The kubelet's default pull policy is Always for `:latest` (or no tag) without a digest: such an
    image is pulled again even where it is present."""
    return not reference.digest and (reference.tag or "latest") == "latest"


def runs_without_pull(image: str, local_images: frozenset[str]) -> bool:
    """Whether a node with these images, which pulls none, starts `image`."""
    parsed = parse_image_reference(image)
    return parsed is not None and not _pulled_always(parsed) and canonical_image(image) in local_images


def check_image_on_nodes(
    image: str, gpu: GpuTypeFacts | None, catalog: Mapping[int, CatalogFacts], *, kind: str
) -> Checked[None]:
    """On a GPU type whose nodes pull no images, only an image they already have starts: any other would
    wait in ImagePullBackOff until its time limit. The refusal names the images that would run there."""
    if gpu is None or not gpu.enabled or gpu.quota is None or not gpu.local_images or not image:
        return Checked(None)  # a type that is already wrong, or whose nodes pull (or are not known)
    parsed = parse_image_reference(image)
    if parsed is None or runs_without_pull(image, gpu.local_images):
        return Checked(None)  # an invalid reference is refused as such
    nodes = f"The {gpu.display_name} nodes pull no images (they reach no registry)"
    if _pulled_always(parsed) and canonical_image(image) in gpu.local_images:
        why = f"{nodes}, and {image} would be pulled: the kubelet always pulls an untagged or :latest image."
    else:
        why = f"{nodes}, and none of them has {image}."
    return refused(None, "image", f"{why} {_images_that_run(gpu.local_images, catalog, kind=kind)}")


def _images_that_run(local_images: frozenset[str], catalog: Mapping[int, CatalogFacts], *, kind: str) -> str:
    """The catalog's entries for this kind that the nodes have, else every tagged image they have."""
    entries = sorted(
        (c.title or c.reference, c.reference)
        for c in catalog.values()
        if c.enabled and c.suits in ("any", kind) and runs_without_pull(c.reference, local_images)
    )
    if entries:
        return "Images that run there: " + ", ".join(f"{title} ({ref})" for title, ref in entries) + "."
    tagged = sorted(name for name in local_images if "@" not in name)
    if tagged:
        return "Images that run there: " + ", ".join(tagged) + "."
    return "No image is known to run there."
