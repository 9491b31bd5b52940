"""Messages between agent and control plane. Versioned: `version` is checked on receipt."""
