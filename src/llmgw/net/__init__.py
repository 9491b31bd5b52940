"""HTTP pieces the agent and the control plane share: listeners, connection guards, handshake and header
caps, error replies. Below both; imports neither."""
