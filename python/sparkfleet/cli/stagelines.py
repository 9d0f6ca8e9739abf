"""The lines `stage`, `verify` and `demo` print for a stage plan, run or verify (the verbs render
with these; what is staged is decided in stage/)."""

from __future__ import annotations

import click

from ..base.units import byte_rate
from .render import human_bytes


def print_space(space: dict, prefix: str = "") -> None:
    line = (
        f"{prefix}space on {space.get('dest', '?')}: need {human_bytes(space['needed'])}, "
        f"free {human_bytes(space.get('free', 0))}, reserve {human_bytes(space['reserve'])}"
    )
    if space["ok"]:
        click.echo(line + ": ok")
    else:
        click.secho(line + ": NOT ENOUGH (the real run would refuse, exit 3)", fg="red")
        if space.get("hint"):
            click.echo(f"{prefix}  hint: {space['hint']}")


def plan_line(s: dict, prefix: str = "") -> str:
    repair = ""
    if s.get("files_to_repair"):
        repair = f", to repair {s['files_to_repair']} ({human_bytes(s['bytes_to_repair'])}: size differs)"
    unread = s.get("files_to_check", 0) - s.get("files_to_repair", 0)
    check = f", to check {unread}"
    if unread and "bytes_to_check_unread" in s:  # only reading tells: said, never counted as nothing
        most = human_bytes(s["bytes_to_check_unread"])
        check += f" (read in the real run; wrong content is re-copied, up to {most})"
    return (
        f"{prefix}{s['repo']}@{s['commit'][:12]}: {s['entries']} entries, {s['links']} links, "
        f"{s['files']} files ({human_bytes(s['bytes_total'])}), to copy {s['files_to_copy']} "
        f"({human_bytes(s['bytes_to_copy'])}){repair}{check}, "
        f"excluded {s['excluded_entries']} ({human_bytes(s['excluded_bytes'])})"
    )


def kit_line(k: dict, prefix: str = "") -> str:
    """One kit checkout's line: which pinned checkout, from where, and what staging did (or would)."""
    what = {
        "present": "present, left alone",
        "fetched": f"fetched from {k['url']}",
        "replaced": f"replaced ({k['why']}) from {k['url']}; the old one kept at {k['kept']}",
        "fetch": f"would fetch from {k['url']}",
        "replace": f"would replace ({k['why']}) from {k['url']}",
    }[k["state"]]
    return f"{prefix}kit {k['pin']} {k['repo']}@{k['rev'][:10]} at {k['path']}: {what}"


def kit_verdict_line(k: dict, prefix: str = "") -> str:
    """verify's line for one kit checkout: ✓ at the pinned rev, clean, complete; ✗ why, and the fix."""
    from ..fleet.kittrees import KitVerdict

    line = f"{prefix}{'✓' if k['ok'] else '✗'} {KitVerdict(**k).summary()}"
    return line if k["ok"] else f"{line}\n{prefix}  fix: {k['fix']}"


def print_stage_run(run: dict, prefix: str = "") -> None:
    for k in run.get("kits", []):
        click.echo(kit_line(k, prefix))
    for r in run["repos"]:
        peer = f", {human_bytes(r['peer_bytes'])} from peers" if r.get("peer_bytes") else ""
        click.echo(
            f"{prefix}{r['repo']}@{r['commit'][:12]}: copied {r['copied_files']} "
            f"({human_bytes(r['copied_bytes'])}{peer}), reused {r['reused_files']}, "
            f"kept {r['kept_files']} ({human_bytes(r['kept_bytes'])}), repaired {r['repaired_files']}, "
            f"excluded {r['excluded_entries']} ({human_bytes(r['excluded_bytes'])}), "
            f"links {r['links_total']} ({r['links_written']} written)"
        )
        v = r.get("verify")
        if v:
            click.echo(
                f"{prefix}  links ok: {v['links_ok']}, dangling: {v['dangling']}, "
                f"mismatches: {v['mismatches']}, missing: {v['missing']}"
            )
    bound = run.get("io_bound")
    limit = ""
    if bound:
        rates = f"{byte_rate(bound['source_read'])} read, {byte_rate(bound['dest_write'])} write"
        limit = (
            f" = {bound['pct_of_bound']:.0f} % of this host's {bound['binding']} ({rates})"
            if bound.get("pct_of_bound") is not None
            else f"; {bound.get('note') or 'no bound'} ({rates})"
        )
    click.echo(f"{prefix}staged in {run['seconds']:.1f} s, {byte_rate(run['mb_per_s'] * 1e6)}{limit}")
