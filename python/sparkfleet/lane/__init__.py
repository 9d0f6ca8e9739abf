"""Everything pure about a lane: its recipe, each rank's spec, binds, limits, replicas, readiness."""
