"""Container image references a cluster job starts from, checked where the job is written or starts
(the training job script: engines.slime.params.check_image; the evaluation's SGLang server:
eval.server.serve). Not in the config check: a preset with the placeholder still plans.

A local Apptainer image (a path ending in .sif) must exist; a registry reference must name a registry
the nodes reach: ``localhost`` (the placeholder of envs/slime-container.yaml, where the image is built
and pushed) is, on a node, the node itself, so every job would fail to pull it.
"""
from __future__ import annotations

from pathlib import Path

LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def check_image(image: str, key: str) -> None:
    """Refuse ``image`` (a registry reference, with or without apptainer's ``docker://``, or a .sif path)
    that no node can start, naming the config ``key`` it came from."""
    if image.endswith(".sif"):
        if not Path(image).is_file():
            raise FileNotFoundError(f"{key}: {image} does not exist")
        return
    reference = image.removeprefix("docker://")
    registry = reference.split("/", 1)[0] if "/" in reference else ""
    if registry.split(":", 1)[0] in LOCAL_HOSTS:
        raise ValueError(f"{key} {image!r} names a registry on localhost, which is each node itself: push the "
                         "image to a registry the nodes reach and name it there, or build a local image "
                         "(apptainer build slime.sif docker-daemon://<image>) and give its .sif path "
                         "(docs/cluster.md, The image)")


def check_command_prefix(words: list, key: str) -> None:
    """The images a command prefix starts (``apptainer exec ... docker://<image>`` or ``<path>.sif``)."""
    for word in map(str, words):
        if word.startswith("docker://") or word.endswith(".sif"):
            check_image(word, key)
