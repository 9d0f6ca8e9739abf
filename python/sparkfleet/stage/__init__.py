"""Staging HF hub caches from the NAS to node-local NVMe: plan (pure), execute (the only writer), verify."""
