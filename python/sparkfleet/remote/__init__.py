"""Reaching hosts: ssh or this machine, the node agent's client, a host's stack, what a deploy left."""
