"""The control plane's records of nodes and replicas (their phases and conditions), built on the agent
protocol's reports. Above wire, below config and the store."""
