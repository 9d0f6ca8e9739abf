"""Mechanisms with no domain: atomic writes, digests, the one error type, processes, locks, units."""
