"""The nodes and replicas: the registry, heartbeats and renewals, desired state, weights plans, the leader's
reconcile passes, ready times, node claims, sleep refusals, the agents' watch."""
