# dgx3 of hosts/fleet.toml (see ../common.nix); its hardware-configuration.nix goes beside this file.
import ../common.nix "dgx3"
