"""Who this node is and where it can be reached: found out, unless the configuration says."""

from __future__ import annotations

import socket
from urllib.parse import urlparse


def node_id(configured: str | None) -> str:
    return configured or socket.gethostname()


def route_address(control_plane_url: str) -> str:
    """The local address on the route to the control plane. A UDP connect picks it and sends nothing."""
    u = urlparse(control_plane_url)
    host, port = u.hostname or "127.0.0.1", u.port or 443
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])
