"""The control plane's doors: the agents' API, the management API (keys, the routers' API, OpenAPI), the API
listener's limits, operator auth, and the in-process router's side."""
