"""What a kit's own launcher does per node that one command template cannot say.

Two pieces, both pure, used by spec.build_spec: the env a kit derives from the node's fabric facts
in its own spelling ([launch.node_env]: the Aiden kit's HOST_IP / B12X_ROCE_HCA /
B12X_ROCE_GID_INDEX, the EXL3 kit's NCCL_IB_HCA "=<hca>:1" and TP_SOCKET_IFNAME), and the fixed
container paths a kit reads its models at ([launch.model_mounts]: the EXL3 kit's /model and
/draft-exl3). The templates' placeholders are checked when the recipe is read (lane/recipe.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .manifest import BindManifest, BindMount

if TYPE_CHECKING:
    from ..facts.fabric import FabricFacts
    from ..fleet.inventory import Inventory

NODE_FIELDS = ("hca", "hcas", "gid_index", "netdev", "host_ip")
_FIELD = re.compile(r"\{([a-z_]+)\}")


def _node_values(facts: FabricFacts | None, my_ip: str | None) -> dict[str, str | None]:
    values: dict[str, str | None] = dict.fromkeys(NODE_FIELDS)
    values["host_ip"] = my_ip
    if facts is not None:
        values.update(
            hca=facts.hcas[0] if facts.hcas else None,
            hcas=",".join(facts.hcas) or None,
            gid_index=str(facts.gid_index),
            netdev=facts.netdev or None,
        )
    return values


def node_env(templates: Mapping[str, str], facts: FabricFacts | None, my_ip: str | None) -> dict[str, str]:
    """[launch.node_env] (`templates`) filled from the node's facts: {hca} (first HCA), {hcas}
    (comma-separated), {gid_index}, {netdev} from its fabric detection, {host_ip} its fabric IP. A key
    whose facts are not known (a dry run, an unreachable node) is left out, never guessed: the plan
    marks it unknown (node_env_missing) and a real launch refuses it."""
    values = _node_values(facts, my_ip)
    missing = node_env_missing(templates, facts, my_ip)
    return {
        key: _FIELD.sub(lambda m: str(values[m.group(1)]), template)
        for key, template in templates.items()
        if key not in missing
    }


def node_env_missing(
    templates: Mapping[str, str], facts: FabricFacts | None, my_ip: str | None
) -> dict[str, tuple[str, ...]]:
    """{env key: the node facts it needs that are not known}, for the [launch.node_env] keys that
    node_env() leaves out: what a dry run shows as unknown and a real launch refuses."""
    values = _node_values(facts, my_ip)
    out = {}
    for key, template in templates.items():
        lacking = tuple(dict.fromkeys(n for n in _FIELD.findall(template) if not values.get(n)))
        if lacking:
            out[key] = lacking
    return out


def model_binds(
    manifest: BindManifest, model_mounts: Mapping[str, str], inv: Inventory
) -> tuple[BindMount, ...]:
    """The manifest's binds, a model's entries moved under the fixed directory its kit reads it at
    ([launch.model_mounts]: {pin: container dir}); each entry keeps its path inside the snapshot.
    Given the recipe's tables, not the recipe: the recipe module reads this one's field names."""
    if not model_mounts:
        return manifest.binds
    mounts = {inv.pins[pin].source: target for pin, target in model_mounts.items() if pin in inv.pins}
    out = []
    for b in manifest.binds:
        target = mounts.get(b.repo or "")
        prefix = manifest.model_paths.get(b.repo or "", "")
        if target and prefix and b.target.startswith(prefix + "/"):
            b = BindMount(b.source, target + b.target[len(prefix) :], b.read_only, b.origin, b.repo)
        out.append(b)
    return tuple(out)
