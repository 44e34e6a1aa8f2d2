"""Cluster description, scenario/trace schema, model zoo and importers (no Mininet, no os-ken)."""
