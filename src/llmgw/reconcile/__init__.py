"""Desired (catalog) against observed (nodes, replicas, usage) -> intents. Pure, given a snapshot and now."""
