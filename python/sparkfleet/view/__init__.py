"""The fleet at a glance: a Prometheus exporter, its alert rules and scrape targets, a live page.

`sparkfleet view serve` runs one HTTP service on the head host: `/metrics` (Prometheus text,
written by prometheus_client) and `/` (the fleet page). Both are drawn from one snapshot of the
fleet that a background loop refreshes (`refresh.py`): a scrape only reads that snapshot, so it
never starts work on a node, and a node that does not answer in time shows as such in the
snapshot instead of holding the scrape.

Modules, top to bottom: `cli/view.py` parses; `service.py` decides where and with which key it
listens; `server.py` serves; `metrics.py` and `page.py` render a `FleetSnapshot` (`snapshot.py`);
`refresh.py` keeps the newest one; `collect.py` builds a lane's and a host's view from the fleet's
records (`lanefiles.py`: reports, incidents, the reference) and the node agents' answers
(`node/hostread.py` is the node side), `gatewaylog.py` the gateway's; `targets.py` writes
Prometheus file_sd targets from the inventory and ships the alert rules (`rules/`);
`metricsdoc.py` renders docs/fleet-ops.md's metrics table from the registry.
"""
