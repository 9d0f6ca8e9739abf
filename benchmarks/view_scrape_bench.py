#!/usr/bin/env python3
"""The fleet view's scrape cost against the fleet's size, side by side; prints one JSON line.

Two fleets, written as real inventories on this machine: 4 hosts with one 4-host lane (the fleet),
and 64 hosts with 16 such lanes (a simulated one: its hosts are loopback, so each node agent is a
local process, read the way a Spark's is). For each, the view refreshes once (every host's
`host-facts` and every lane's status, through the real agents: the work the background loop does
per interval), then serves: N scrapes of /metrics and N loads of / over HTTP from a curl child,
while the refresh loop is idle. Reported per fleet:

- `scrape_cpu_ms` / `page_cpu_ms`: the exporter process's CPU (user + system, getrusage) per
  request, the median of `--rounds` rounds of N requests;
- `node_calls_per_scrape`: agent calls made while the scrapes ran (the scrape reads the snapshot:
  this must be 0);
- `refresh_wall_s`, `refresh_node_calls`: one refresh, and how many agent calls it made;
- `metrics_bytes`, `series`: what one scrape returns.

Then `ratio_64_to_4.scrape_cpu` etc. The issue's bound: a 4-host scrape under 100 ms of CPU, a
64-host one under 1 s; `within_bound` says whether both held here.

Usage: python benchmarks/view_scrape_bench.py [--rounds 5] [--scrapes 20]
       python benchmarks/view_scrape_bench.py --smoke   (4 and 8 hosts, fewer scrapes)
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from sparkfleet.fleet import inventory  # noqa: E402
from sparkfleet.remote import nodecall  # noqa: E402
from sparkfleet.view.refresh import Refresher  # noqa: E402
from sparkfleet.view.server import serve  # noqa: E402

LANE_HOSTS = 4


def write_fleet(root: Path, hosts: int) -> Path:
    """hosts/fleet.toml with `hosts` loopback hosts and one 4-host lane per four hosts (not running)."""
    nas = root / "nas" / "hub"
    lines = ["schema_version = 1", "", "[defaults]", 'ssh_user = "root"', f'nas_hub = "{nas}"']
    lines += ["reserve_gib = 100", ""]
    (root / "nas" / "hub").mkdir(parents=True)
    for i in range(1, hosts + 1):
        hub = root / f"dgx{i}" / "nvme" / "hub"
        lines += [f"[hosts.dgx{i}]", 'address = "localhost"', f'local_hub = "{hub}"', ""]
    lines += ["[pins.w]", 'kind = "hf"', 'repo = "org/weights"', f'revision = "{"a" * 40}"', ""]
    (root / "fleet" / "hosts").mkdir(parents=True)
    (root / "fleet" / "hosts" / "fleet.toml").write_text("\n".join(lines))
    for lane in range(hosts // LANE_HOSTS):
        names = [f"dgx{lane * LANE_HOSTS + j + 1}" for j in range(LANE_HOSTS)]
        d = root / "fleet" / "recipes" / f"lane{lane}"
        d.mkdir(parents=True)
        d.joinpath("recipe.toml").write_text(
            f'[lane]\nhosts = {json.dumps(names)}\n\n[[models]]\npin = "w"\n\n[world]\ntp = {LANE_HOSTS}\n\n'
            f'[launch]\nruntime = "process"\nport = {31000 + lane}\nfabric = "none"\ncommand = ["true"]\n'
            '[view]\nreference_tps = 35.0\n'
        )  # fmt: skip
    return root / "fleet"


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(hosts: int, rounds: int, scrapes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="sparkfleet-view-bench-") as tmp:
        root = write_fleet(Path(tmp), hosts)
        inv = inventory.load(root)
        calls = {"n": 0}
        real = nodecall.call_agent

        def counted(*a, **kw):
            calls["n"] += 1
            return real(*a, **kw)

        # the host facts and the lane status both reach their agents through nodecall's one client
        nodecall.call_agent = counted
        refresher = Refresher(lambda: inv, interval_s=3600, node_timeout_s=120)
        try:
            t0 = time.monotonic()
            snap = refresher.refresh()
            refresh_wall = time.monotonic() - t0
            refresh_calls = calls["n"]
            server = serve(refresher, "127.0.0.1", 0, None, 15.0)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            url = f"http://127.0.0.1:{server.server_address[1]}"
            curl = shutil.which("curl")
            per = {}
            body = b""
            before_calls = calls["n"]
            for path in ("/metrics", "/"):
                samples = []
                for _ in range(rounds):
                    c0 = cpu_s()
                    argv = [curl, "-s", "-f"] + ["-o", "/dev/null", url + path] * scrapes
                    subprocess.run(argv, check=True, timeout=300, stdout=subprocess.DEVNULL)
                    samples.append((cpu_s() - c0) / scrapes * 1000)
                per[path] = statistics.median(samples)
            with subprocess.Popen([curl, "-s", url + "/metrics"], stdout=subprocess.PIPE) as p:
                body = p.stdout.read()
            server.shutdown()
            server.server_close()
        finally:
            refresher.stop()
            nodecall.call_agent = real
        series = [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]
        return {
            "hosts": hosts,
            "lanes": hosts // LANE_HOSTS,
            "reachable": sum(h.reachable for h in snap.hosts),
            "refresh_wall_s": round(refresh_wall, 2),
            "refresh_node_calls": refresh_calls,
            "scrape_cpu_ms": round(per["/metrics"], 2),
            "page_cpu_ms": round(per["/"], 2),
            "node_calls_per_scrape": (calls["n"] - before_calls) / (2 * rounds * scrapes),
            "metrics_bytes": len(body),
            "series": len(series),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if shutil.which("curl") is None:
        print(json.dumps({"error": "cannot run here: curl is not installed"}))
        return 2
    sizes = (4, 8) if args.smoke else (4, 64)
    rounds, scrapes = (2, 5) if args.smoke else (args.rounds, args.scrapes)
    small, large = (measure(n, rounds, scrapes) for n in sizes)
    out = {
        "bench": "view_scrape",
        "rounds": rounds,
        "scrapes_per_round": scrapes,
        "fleets": [small, large],
        f"ratio_{sizes[1]}_to_{sizes[0]}": {
            "scrape_cpu": round(large["scrape_cpu_ms"] / max(small["scrape_cpu_ms"], 1e-6), 2),
            "page_cpu": round(large["page_cpu_ms"] / max(small["page_cpu_ms"], 1e-6), 2),
            "refresh_wall": round(large["refresh_wall_s"] / max(small["refresh_wall_s"], 1e-6), 2),
            "series": round(large["series"] / max(small["series"], 1), 2),
        },
        "within_bound": small["scrape_cpu_ms"] < 100 and large["scrape_cpu_ms"] < 1000,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
