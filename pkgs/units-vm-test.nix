# NixOS VM test of the staging and lane units (hydraJobs.units-vm.x86_64-linux), the way
# graham33/nixos-dgx-spark tests its modules (checks/dgx-dashboard-vm.nix: pkgs.testers.runNixOSTest,
# plain nixpkgs, hardware parts stubbed). sparkfleet's own modules, as a Spark imports them, on a
# VM that heads a one-host lane; `sparkfleet` is a stand-in that records its argv, environment and
# the user it runs as, so the test asserts what systemd really does with the generated units:
#   - the staging unit runs `sparkfleet stage vm --here --json` as the inventory's user, with the
#     stage root of /etc, under its hardening (it can write the local hub and nothing else);
#   - the lane unit starts and stops the lane (launch --no-wait / stop) as that user, stays active
#     after the command returns (oneshot + RemainAfterExit), and a switch never restarts it alone;
#   - the NAS hub mount comes first (RequiresMountsFor; a tmpfs stands in for the NFS export).
# Needs KVM to run (CI's vm job); `nix flake check --no-build` evaluates it everywhere.
{ pkgs, modules }:
let
  lane = "vm-lane";
  user = "spark";
  localHub = "/home/${user}/hf-local/hub";
  calls = "${localHub}/sparkfleet-calls.log";
  # the stand-in CLI: one line per call, "<user> <argv...> root=<SPARKFLEET_ROOT>"
  standIn = pkgs.writeShellScriptBin "sparkfleet" ''
    echo "$(id -un) $* root=''${SPARKFLEET_ROOT:-unset}" >> ${calls}
    if [[ $1 == stage ]] && touch /etc/sparkfleet-must-not-write 2>/dev/null; then
      echo "stage could write /etc" >> ${calls}
    fi
  '';
  # the VM's inventory, plain files (a derivation here would be import-from-derivation)
  vmFleet = ./units-vm-test;
  unit = "sparkfleet-lane-${lane}";
in
pkgs.testers.runNixOSTest {
  name = "sparkfleet-units";

  nodes.machine = { lib, ... }: {
    imports = modules;
    sparkfleet = {
      package = standIn;
      host = "vm";
      fleetRoot = vmFleet;
      storage.enable = true;
      staging.enable = true;
      lanes.enable = true;
      lanes.runtime = "podman";
    };
    # the NFS export stands in as a tmpfs: the units' RequiresMountsFor is what is under test
    fileSystems."/mnt/nas/huggingface" = lib.mkForce { device = "none"; fsType = "tmpfs"; };
    hardware.nvidia-container-toolkit.enable = lib.mkForce false;
    users.users.${user} = { isNormalUser = true; extraGroups = [ "wheel" ]; };
    virtualisation.memorySize = 1024;
  };

  testScript = ''
    machine.wait_for_unit("multi-user.target")

    machine.succeed("systemctl start sparkfleet-stage.service")
    machine.succeed("findmnt /mnt/nas/huggingface")
    log = machine.succeed("cat ${calls}")
    assert "${user} stage vm --here --json root=/etc/sparkfleet/stage-root" in log, log
    assert "stage could write /etc" not in log, log

    machine.succeed("systemctl start ${unit}.service")
    machine.succeed("systemctl is-active ${unit}.service")
    machine.succeed("systemctl stop ${unit}.service")
    log = machine.succeed("cat ${calls}")
    assert "${user} launch ${lane} --no-wait root=/nix/store/" in log, log
    assert "${user} stop ${lane} root=/nix/store/" in log, log

    # a lane's unit is never restarted by a switch on its own; its -spec companion reloads it
    machine.succeed("systemctl show -p RemainAfterExit ${unit}.service | grep -x RemainAfterExit=yes")
    machine.succeed("systemctl is-active ${unit}-spec.service")
  '';
}
