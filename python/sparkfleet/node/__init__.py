"""What runs on a node: the agent and everything it starts, reads and records there."""
