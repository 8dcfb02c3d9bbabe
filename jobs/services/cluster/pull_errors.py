"""An image pull failure, as the kubelet reports it (a waiting reason and containerd's error text), said in
words a researcher can act on: which image, and whether the name is wrong, the registry unreachable, access
refused, or the node forbidden to pull. The raw text (gRPC codes, HTTP requests) never reaches the page;
the pod's events still hold it for an admin. Pure: no I/O."""

from __future__ import annotations

# (words a raw message may contain, lower-cased) -> the sentence shown; the first match wins.
_CAUSES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("unauthorized", "authentication required", "denied", "403 forbidden", "no basic auth credentials"),
     "the registry refused access (a private image needs the registry's credentials)."),
    (("not found", "manifest unknown", "name unknown", "no such image", "404"),
     "the registry has no image of that name and tag (check both)."),
    (("connection refused", "no such host", "i/o timeout", "dial tcp", "network is unreachable",
      "server misbehaving", "tls:", "x509"),
     "its registry cannot be reached from the node."),
)  # fmt: skip


def image_pull_message(reason: str, raw: str, image: str) -> str:
    """ "Cannot pull the image: <image>: <why>." for a waiting reason in IMAGE_PULL_REASONS."""
    text = raw.lower()
    if reason == "ErrImageNeverPull":
        why = "it is not on the node, and its pull policy forbids pulling it."
    elif reason == "InvalidImageName":
        why = "that is not a valid image reference."
    else:
        why = next((sentence for words, sentence in _CAUSES if any(w in text for w in words)), "")
        if not why:
            why = (
                "the node could not pull it and tries again shortly."
                if reason == "ImagePullBackOff"
                else "the node could not pull it."
            )
    return f"Cannot pull the image: {image or 'the image'}: {why}"
