"""What the router and the control plane say to each other (the router's view of replicas, admissions, usage and
measurements) and the management API's rows for people (views). Above the store and config, below router and
control."""
