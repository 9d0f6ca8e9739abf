"""Engram per-rank packs: each rank's contiguous rows of the engram tables, on its own NVMe.

The tables (DeepSeek-V4.1-Flash layers 1 and 14 in the TP4 lane: 384,006,168 / 384,016,682 rows) are
too big to read over NFS per token and too big to copy whole to every node; a rank only ever reads
rows [floor(r*R/W), floor((r+1)*R/W)). `pack` cuts exactly those rows out of the safetensors shards
by byte ranges into `engram-l{layer}-r{rank}of{W}.bin` (the DSV41EN1 layout the lane's runtime
reads), with a receipt that says what was packed from what.
"""
