"""Benchmark runners: plain scripts that need only torch, pyarrow and nvidia-ml-py.

A bare GPU node without Dagster runs them as `python -m pipelines.runners.<name>`; the Dagster
assets run the very same modules as subprocesses, so a kernel that crashes the process cannot
take the orchestrator down. Runners write measurement chunks (Parquet, MEASUREMENT_SCHEMA) into a
staging folder; the assets ingest those into the warehouse.
"""
