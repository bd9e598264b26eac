"""collate."""
