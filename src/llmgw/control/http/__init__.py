"""The control plane's doors: the agents' API, the management API (keys, the routers' API, the dashboard's routes,
OpenAPI), the API listener's limits, operator auth, and the in-process router's side."""
