"""Trace schema and I/O."""
