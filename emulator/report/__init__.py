"""Reports of a simulation: prediction.json, the Perfetto timeline and the terminal table."""
