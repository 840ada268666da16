"""Scripts beside the destila package: measurements, the peer comparisons, the docs' generated tables."""
