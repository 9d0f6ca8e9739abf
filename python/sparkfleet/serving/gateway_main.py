"""Start the real gateway (`smg`, PyPI) from a 0600 JSON file, so its keys are never in an argv.

`smg launch --api-key KEY` would put the key in `ps` for every user of the head host. This runs the
very same code path in-process instead: smg's own `parse_router_args` and `launch_router`
(smg/launch_router.py, smg 1.13.0), with the arguments read from the file sparkfleet wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m sparkfleet.serving.gateway_main CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text())
    from smg.launch_router import launch_router, parse_router_args

    launch_router(parse_router_args([str(a) for a in config["argv"]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
