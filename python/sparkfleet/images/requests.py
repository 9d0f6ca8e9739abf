"""The image actions' requests: the node contract's part that `images/` reads on the node.

They stand here, below the agent, because the agent calls into `images/` (`images.node`) and
`images/load` builds them on the controller; `sparkfleet.node.protocol` lists them with every
other action's request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..remote.wire import LaneRequest, Request


@dataclass(frozen=True)
class ImageStateRequest(LaneRequest):
    """Which image the node's engine holds for the lane (and whether it holds `expect`)."""

    ACTION: ClassVar[str] = "image-state"
    engine: str
    expect: str | None = None


@dataclass(frozen=True)
class ImageCommitRequest(LaneRequest):
    """Record that the node now holds `image_id` for the lane."""

    ACTION: ClassVar[str] = "image-commit"
    engine: str
    image_id: str
    source: str | None = None
    repo_digest: str | None = None


@dataclass(frozen=True)
class ImagePullRequest(Request):
    """Pull `repo@digest` from the fleet registry into the node's engine."""

    ACTION: ClassVar[str] = "image-pull"
    engine: str
    registry: str
    repo: str
    digest: str
    cert_dir: str | None = None
