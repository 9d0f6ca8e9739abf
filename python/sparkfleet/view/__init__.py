"""The fleet at a glance: a Prometheus exporter, its alert rules and scrape targets, a live page.

`sparkfleet view serve` runs one HTTP service on the head host: `/metrics` (Prometheus text,
written by prometheus_client) and `/` (the fleet page). Both are drawn from one snapshot of the
fleet that a background loop refreshes (`refresh.py`): a scrape only reads that snapshot, so it
never starts work on a node, and a node that does not answer in time shows as such in the
snapshot instead of holding the scrape.

Modules, top to bottom: `cli/view.py` parses; `server.py` serves; `metrics.py` and `page.py`
render a `FleetSnapshot` (`snapshot.py`); `collect.py` builds one from the fleet's records and
the node agents' answers (`launch/hostread.py` is the node side); `targets.py` writes Prometheus file_sd
targets from the inventory; `rules.py` ships the alert rules.
"""
