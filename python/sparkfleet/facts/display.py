"""A node's DRM card, for a lane that keeps its KV cache in display memory (the EXL3 kit).

Why this exists: the EXL3 kit at 878e0ee runs "the proven display-only KV allocator"
(release/config.py; .env.ds41.example: "1792 MiB display KV/rank and zero ordinary KV"). Its
container gets the node's DRM card at /dev/dri/card0 and the card's group
(portable_node.py docker_command(): `--device=<drm_card>:/dev/dri/card0 --group-add <drm_gid>`),
and its preflight refuses a node unless `nvidia_drm` is loaded with modeset=Y and fbdev=N and the
card is a character device of that group ("Display KV needs nvidia_drm modeset=1 fbdev=0 and the
configured DRM card ... No settings were changed."). A rank started without the card has no KV
pool at all. This module reads those facts on the node and says what is wrong; it never changes a
module parameter (neither does the kit): on NixOS the host's configuration declares them.

Node-side and light: the agent imports it (no TOML, no jsonschema).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import SparkfleetError

# Where the loaded nvidia_drm module shows its parameters (the kit reads the same files).
NVIDIA_DRM_PARAMETERS = "/sys/module/nvidia_drm/parameters"
CARD_PATH = re.compile(r"/dev/dri/card[0-9]+")  # what the kit accepts (release/config.py)


@dataclass(frozen=True)
class DisplayDevice:
    """The card a rank's container gets: the host's card, where the container sees it, and the
    nvidia_drm parameters the pool needs, as (parameter, value) pairs."""

    card: str  # host path (hosts/fleet.toml drm_card)
    target: str  # container path ([launch.display] target)
    nvidia_drm: tuple[tuple[str, str], ...] = ()

    def device_arg(self) -> str:
        return f"{self.card}:{self.target}"

    @classmethod
    def from_dict(cls, d: dict) -> DisplayDevice:
        """A DisplayDevice from its JSON form (a spec or probe request sent to the node)."""
        return cls(d["card"], d["target"], tuple((str(k), str(v)) for k, v in d.get("nvidia_drm", ())))


@dataclass(frozen=True)
class DisplayNeed:
    """A recipe's [launch.display]: where the container sees the card, and the parameters it needs."""

    target: str
    nvidia_drm: tuple[tuple[str, str], ...] = ()

    def on(self, card: str) -> DisplayDevice:
        """This need on a host whose card is `card`."""
        return DisplayDevice(card, self.target, self.nvidia_drm)

    def wants(self) -> str:
        """The parameters as the kit's docs write them: modeset=Y fbdev=N."""
        return " ".join(f"{k}={v}" for k, v in self.nvidia_drm)

    def fix(self, host: str) -> str:
        """What makes `host` fit (launch's refusal and doctor's ✗ say the same): the host's own
        configuration, since sparkfleet, like the kit, changes no module parameter."""
        return (
            f"load nvidia_drm with {self.wants()} on {host} (a headless host; NixOS: "
            "boot.extraModprobeConfig) and set its drm_card in hosts/fleet.toml to its card "
            "(`ls -l /dev/dri`); sparkfleet changes no module parameter"
        )


@dataclass(frozen=True)
class DisplayFacts:
    """What the node has: is the card a character device, its group, and each parameter as read
    (None: the file is not there, e.g. nvidia_drm not loaded)."""

    card: str
    char_device: bool
    gid: int | None
    parameters: dict[str, str | None]


def read_display(dev: DisplayDevice, parameters_dir: str = NVIDIA_DRM_PARAMETERS) -> DisplayFacts:
    """The node's card and nvidia_drm parameters, read, never changed."""
    try:
        st = os.stat(dev.card)
        char, gid = stat.S_ISCHR(st.st_mode), st.st_gid
    except OSError:
        char, gid = False, None
    values: dict[str, str | None] = {}
    for name, _ in dev.nvidia_drm:
        try:
            values[name] = (Path(parameters_dir) / name).read_text().strip()
        except OSError:
            values[name] = None
    return DisplayFacts(dev.card, char, gid, values)


def display_problems(dev: DisplayDevice, facts: DisplayFacts) -> list[str]:
    """Why this node cannot give a rank its display-KV pool, each naming the card or parameter."""
    out = []
    if not facts.char_device:
        out.append(f"{dev.card} is not a character device here (no DRM card at that path)")
    for name, want in dev.nvidia_drm:
        got = facts.parameters.get(name)
        if got is None:
            out.append(f"nvidia_drm {name}: not readable (is the nvidia_drm module loaded?), needs {want}")
        elif got != want:
            out.append(f"nvidia_drm {name} = {got}, needs {want}")
    return out


def card_gid(card: str) -> int:
    """The group of the node's DRM card, which the container is added to (`--group-add`)."""
    try:
        st = os.stat(card)
    except OSError as exc:
        raise SparkfleetError(f"the DRM card {card} cannot be read on this node: {exc.strerror}") from None
    if not stat.S_ISCHR(st.st_mode):
        raise SparkfleetError(f"{card} is not a character device: no DRM card to give the rank")
    return st.st_gid
