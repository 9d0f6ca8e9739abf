"""The demo fleet with its lane as two copies (`[gateway] replicas`) of one host each."""

from __future__ import annotations

from sparkfleet.demo.fleet import DEMO_LANE, write_demo_fleet


def two_copies(workdir):
    """The demo fleet with its lane as two copies of one host each: dgx1 (replica 0), dgx2 (replica 1)."""
    demo = write_demo_fleet(workdir, shard_bytes=64 * 1024)
    recipe = demo.root / "recipes" / DEMO_LANE / "recipe.toml"
    text = recipe.read_text().replace('hosts = ["dgx1", "dgx2"]', 'hosts = ["dgx1"]', 1)
    text = text.replace("\ntp = 2\n", "\ntp = 1\n", 1)  # one host a copy
    assert text.count("\n[gateway]\n") == 1  # the demo's lane serves through the gateway already
    recipe.write_text(text.replace("\n[gateway]\n", '\n[gateway]\nreplicas = [["dgx1"], ["dgx2"]]\n', 1))
    return demo
