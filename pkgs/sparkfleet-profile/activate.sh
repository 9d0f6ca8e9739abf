#!/usr/bin/env bash
# Activation of the deploy-rs `sparkfleet` profile (deploy-rs.lib.<system>.activate.custom).
#
# Installs the profile's systemd units, reloads systemd once if anything changed, and restarts
# only what changed: a lane edit deploys as `deploy .#dgx2.sparkfleet` without touching the
# staging timer or the other lanes. Running it again with the same profile changes nothing and
# calls nothing. Works on hosts that run Nix on DGX OS (Ubuntu); on NixOS the units come with
# the system profile (modules/), so there it only refreshes the tooling and leaves units alone.
#
# Environment (tests point these at a temporary root and a recording systemctl):
#   PROFILE                   the activated profile (deploy-rs sets it; default: this script's ../)
#   SPARKFLEET_ACTIVATE_ROOT  filesystem root to install into (default /)
#   SYSTEMCTL                 systemctl command (default systemctl)
set -euo pipefail

profile=${PROFILE:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)}
root=${SPARKFLEET_ACTIVATE_ROOT:-/}
root=${root%/}
systemctl=${SYSTEMCTL:-systemctl}
units_src=$profile/share/sparkfleet/units
unit_dir=$root/etc/systemd/system
state_dir=$root/var/lib/sparkfleet
ledger=$state_dir/installed-units

say() { printf 'sparkfleet-activate: %s\n' "$*"; }

if [[ -e $root/etc/NIXOS ]]; then
  say "NixOS host: units are part of the system profile; tooling updated, units left to NixOS"
  exit 0
fi
if [[ ! -d $units_src ]]; then
  say "no units in $units_src" >&2
  exit 1
fi

mkdir -p -- "$unit_dir" "$state_dir"

# write_atomic SRC DEST: temp in the same directory, fsync, rename, fsync the directory.
write_atomic() {
  local src=$1 dest=$2 tmp
  tmp=$(mktemp -- "$(dirname -- "$dest")/.$(basename -- "$dest").sf-tmp-XXXXXXXX")
  cat -- "$src" >"$tmp"
  chmod 0644 -- "$tmp"
  sync -- "$tmp"
  mv -f -- "$tmp" "$dest"
  sync -- "$(dirname -- "$dest")"
}

has_install_section() { grep -q '^\[Install\]' -- "$1"; }

shipped=()
for src in "$units_src"/*; do
  [[ -f $src ]] && shipped+=("$(basename -- "$src")")
done

added=() changed=() removed=()
for name in "${shipped[@]}"; do
  dest=$unit_dir/$name
  if [[ -f $dest ]] && cmp -s -- "$units_src/$name" "$dest"; then
    continue
  fi
  if [[ -e $dest ]]; then changed+=("$name"); else added+=("$name"); fi
  write_atomic "$units_src/$name" "$dest"
done

# Units an earlier activation installed that this profile no longer ships (a lane removed).
if [[ -f $ledger ]]; then
  while IFS= read -r name; do
    [[ -z $name ]] && continue
    if [[ ! -e $units_src/$name ]]; then removed+=("$name"); fi
  done <"$ledger"
fi
for name in "${removed[@]}"; do
  "$systemctl" disable --now -- "$name" || say "warning: could not stop $name"
  rm -f -- "$unit_dir/$name"
done

ledger_tmp=$(mktemp -- "$state_dir/.installed-units.sf-tmp-XXXXXXXX")
printf '%s\n' "${shipped[@]}" >"$ledger_tmp"
if [[ -f $ledger ]] && cmp -s -- "$ledger_tmp" "$ledger"; then
  rm -f -- "$ledger_tmp"
else
  write_atomic "$ledger_tmp" "$ledger"
  rm -f -- "$ledger_tmp"
fi

if (( ${#added[@]} + ${#changed[@]} + ${#removed[@]} == 0 )); then
  say "units unchanged (${#shipped[@]} installed); nothing restarted"
  exit 0
fi

"$systemctl" daemon-reload

for name in "${added[@]}"; do
  if has_install_section "$unit_dir/$name"; then
    if [[ $name == *.timer || $name == *.automount ]]; then
      "$systemctl" enable --now -- "$name"
    else
      "$systemctl" enable -- "$name"
    fi
  fi
done
for name in "${changed[@]}"; do
  case $name in
    *.timer) "$systemctl" restart -- "$name" ;;
    # a changed NAS mount applies at its next mount; unmounting under a serving lane would hurt
    *.mount | *.automount) ;;
    # a lane that is up restarts with its new unit, one that is stopped stays stopped; queued
    # (--no-block) so the activation never waits on a lane's start
    *.service) "$systemctl" try-restart --no-block -- "$name" ;;
  esac
done
say "added: ${added[*]:-none}; changed: ${changed[*]:-none}; removed: ${removed[*]:-none}"
