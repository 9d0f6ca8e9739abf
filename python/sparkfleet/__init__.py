"""sparkfleet: reproducible staging, launch and bench for a DGX Spark fleet."""

__version__ = "0.1.0"
