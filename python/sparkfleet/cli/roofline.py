"""`sparkfleet roofline LANE` and `sparkfleet measure HOST`: the physical limit and the figures behind it."""

from __future__ import annotations

import click

from ..roofline import service
from ..roofline.machine import figure_text
from .options import JSON
from .render import echo_json, load_inventory


@click.command()
@click.argument("lane")
@click.option("--host", show_default="the lane's head", help="Read the staged files on this host.")
@click.option(
    "--context", type=click.IntRange(min=1), default=1024, show_default=True,
    help="Context length the decode bound is computed at.",
)  # fmt: skip
@click.option("--here", is_flag=True, help="Node side: read the files on this machine and answer JSON.")
@click.option(
    "--trust-measured", is_flag=True,
    help="Use a measured figure even where it is under 25 % or over 150 % of the kind's declared one.",
)  # fmt: skip
@JSON
@click.pass_context
def roofline(
    ctx: click.Context,
    lane: str,
    host: str | None,
    context: int,
    here: bool,
    trust_measured: bool,
    as_json: bool,
) -> None:
    """Bytes and FLOPs one token costs the LANE's model, and the decode bound they set.

    Reads config.json and the safetensors headers of the lane's staged snapshot on the head host
    (over ssh, or here), never the weights themselves. Every bench report of the lane carries the
    same figures next to what was measured.

    \b
    Examples:
      sparkfleet roofline demo-exl3-2x
      sparkfleet roofline demo-exl3-2x --context 32768 --json
    """
    inv = load_inventory(ctx)
    the_lane = inv.lane(lane)
    the_host = inv.host(host) if host else None
    if here:
        echo_json(service.inputs_here(inv, the_lane, the_host or inv.host(the_lane.hosts[0])))
        return
    out = service.lane_roofline(inv, the_lane, the_host, context, trust_measured)
    if as_json:
        echo_json(out)
        return
    m, s = out["model"], out["step"] or {}
    click.echo(f"{lane}: {m['name']}, read from {out['read_from']} on {out['host']}")
    click.echo(
        f"  per decode token: {m['decode_bytes_per_token'] / 1e9:.4f} GB of weights "
        f"({m['decode_bytes_per_token_per_rank'] / 1e9:.4f} GB a rank at TP{out['tp']})"
    )
    for category, nbytes in sorted(m["breakdown"].items(), key=lambda x: -x[1]):
        click.echo(f"    {category:<14} {nbytes / 1e9:10.4f} GB")
    if m["kv_bytes_per_token"]:
        click.echo(f"  KV cache: {m['kv_bytes_per_token']} bytes per context token")
    if s:
        click.echo(
            f"  one step at context {context}: memory {s['memory_ms']:.2f} ms"
            + (f", compute {s['compute_ms']:.3f} ms" if s["compute_ms"] is not None else "")
            + (f", fabric {s['fabric_ms']:.3f} ms" if s["fabric_ms"] is not None else "")
            + f" -> bound {s['bound_tps_at_1_token_per_step']:.1f} tok/s ({s['binding']}-bound)"
        )
    if s.get("bound_tps_if_every_draft_accepted"):
        click.echo(f"  with every draft accepted: {s['bound_tps_if_every_draft_accepted']:.1f} tok/s")
    for name, f in out["machine"]["figures"].items():
        how = f["source"] or (f["measured"] or {}).get("method")
        click.echo(f"  {name}: {figure_text(name, f['value'])} ({f['origin']}; {how})")
    for note in out["notes"]:
        click.echo(f"  note: {note}")


@click.command()
@click.argument("host")
@click.option("--quick", is_flag=True, help="64 MiB probes instead of 512 MiB.")
@click.option("--here", is_flag=True, help="Node side: measure this machine as HOST and answer JSON.")
@JSON
@click.pass_context
def measure(ctx: click.Context, host: str, quick: bool, here: bool, as_json: bool) -> None:
    """Measure HOST's NVMe read/write, NAS read and memory rates on HOST itself, and record them.

    Where torch sees a GPU: its copy bandwidth and bf16 matmul rate, timed with CUDA events after
    warm-ups, best of several trials (the spread is shown). The roofline uses a measured figure over
    the declared one ([host_kinds] in hosts/fleet.toml), unless it is under 25 % or over 150 % of
    it: then it is recorded with a warning and `roofline --trust-measured` is needed to use it.

    \b
    Examples:
      sparkfleet measure dgx1 --quick
      sparkfleet measure dgx2 --quick --json
      sparkfleet measure dgx3               # real fleet: 512 MiB probes
    """
    inv = load_inventory(ctx)
    the_host = inv.host(host)
    found = (
        {n: m.__dict__ for n, m in service.measure_here(inv, the_host, quick).items()}
        if here
        else service.measure_host(inv, the_host, quick)
    )
    if not here:
        for warning in service.measurement_warnings(inv, the_host, found):
            click.echo(f"warning: {host}: {warning}", err=True)
    if as_json or here:
        echo_json(found)
        return
    for name, m in found.items():
        spread = f", spread {100 * m['spread']:.1f} %" if m.get("spread") is not None else ""
        rate = figure_text(name, m["value"])
        click.echo(f"{host} {name:<16} {rate:>12}  ({m['method']}{spread}; {m['measured_utc']})")
