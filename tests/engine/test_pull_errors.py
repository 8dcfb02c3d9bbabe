"""Image pull failures in words (jobs/services/cluster/pull_errors.py), from the texts containerd 1.6 and the
kubelet write (pure)."""

from __future__ import annotations

import pytest

from jobs.services.cluster.pull_errors import image_pull_message

IMAGE = "localhost/gpuportal/no-such-image:1"


@pytest.mark.parametrize(
    ("reason", "raw", "why"),
    [
        ("ErrImagePull",
         f'rpc error: code = Unknown desc = failed to pull and unpack image "{IMAGE}": failed to resolve reference '
         f'"{IMAGE}": failed to do request: Head "https://localhost/v2/gpuportal/no-such-image/manifests/1": dial '
         "tcp 127.0.0.1:443: connect: connection refused",
         "its registry cannot be reached from the node."),
        ("ErrImagePull",
         f'rpc error: code = NotFound desc = failed to pull and unpack image "{IMAGE}": failed to resolve reference '
         f'"{IMAGE}": {IMAGE}: not found',
         "the registry has no image of that name and tag (check both)."),
        ("ErrImagePull",
         'rpc error: code = Unknown desc = failed to pull and unpack image "nvcr.io/x/y:1": failed to resolve '
         "reference: pulling from host nvcr.io failed with status code [manifests 1]: 401 Unauthorized",
         "the registry refused access (a private image needs the registry's credentials)."),
        ("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"', "the node could not pull it and tries again shortly."),
        ("ErrImageNeverPull", f'Container image "{IMAGE}" is not present with pull policy of Never',
         "it is not on the node, and its pull policy forbids pulling it."),
        ("InvalidImageName", 'Failed to apply default image tag "UPPER/x": couldn\'t parse image reference',
         "that is not a valid image reference."),
    ],
)  # fmt: skip
def test_a_pull_failure_is_said_in_words_with_the_image_and_no_raw_text(reason, raw, why):
    message = image_pull_message(reason, raw, IMAGE)
    assert message == f"Cannot pull the image: {IMAGE}: {why}"
