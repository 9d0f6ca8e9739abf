"""Lane images built by Nix, loaded into each host's engine, and the ID each host holds.

`nix build .#mia-tp4-image` gives a stream script (`./result | docker load`), not an image in
any engine. `sparkfleet image load LANE` computes the build's image ID (the sha256 of its config,
which is what docker and podman call the image ID), loads it into docker/podman on every host of
the lane, and records per host which ID it holds and which it held before (kept, for rollback).
A lane whose recipe says `image_build = "<package>"` launches that ID, and launch/doctor refuse a
host whose recorded ID is not the build's.
"""
