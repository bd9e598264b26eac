"""Calibration: measure a GPU (or this CPU) and gather the public measurements into the warehouse.

    assets.py      hardware inventory, kernel and collective benchmarks, reference import, DuckDB views
    checks.py      the warehouse partition's quality checks (integrity checks block training)
    automation.py  the calibration job, weekly recalibration, the sensor for uncovered trace shapes
"""
