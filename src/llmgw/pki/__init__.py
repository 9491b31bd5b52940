"""A small certificate authority for the agent <-> control plane link, and TLS contexts that use it.

`ca` writes files (a CA, node certificates); `tls` builds `ssl.SSLContext`s from them. Node identity is the
certificate's CN, which equals its SAN DNS name and the node id.
"""

from llmgw.pki.ca import CA_CERT, CA_KEY, init_ca, issue, validate_node_id
from llmgw.pki.tls import client_context, peer_node_id, server_context

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "client_context",
    "init_ca",
    "issue",
    "peer_node_id",
    "server_context",
    "validate_node_id",
]
