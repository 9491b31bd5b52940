"""What the router and the control plane say to each other: the router's view of replicas, admissions,
usage and measurements. Above the store and config, below both router and control."""
