"""The model's programs seen from the host: smolprobe's KV page arithmetic (kvcache), runs
across configurations (compare), smolserve (serve), the figures (plot) and the tables."""
