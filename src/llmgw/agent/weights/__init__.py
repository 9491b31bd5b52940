"""Weights: observe the configured directories; resolve a model's source to a path on this node."""
