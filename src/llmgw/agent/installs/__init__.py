"""Engines a node has: found where installs put them, proven to run, re-checked periodically."""
