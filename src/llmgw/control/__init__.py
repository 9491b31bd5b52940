"""The control plane: registry, catalog, reconciler loop, management API; hosts the router."""
