"""What the operator declared: the inventory (fleet.toml + recipes) and what follows from it alone."""
