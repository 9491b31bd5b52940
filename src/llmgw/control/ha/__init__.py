"""Several servers on one store: following the leader and the shared store, node liveness shared without a write per
node."""
