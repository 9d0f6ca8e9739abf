"""What is observed on a host: fabric, DRM card, memory, the hub cache, safetensors headers, key files."""
