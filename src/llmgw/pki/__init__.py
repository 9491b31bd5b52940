"""A small certificate authority for the agent <-> control plane link, and TLS contexts that use it.

`ca` writes files (a CA, node certificates); `tls` builds `ssl.SSLContext`s from them. Node identity is the
certificate's CN, which equals its SAN DNS name and the node id.
"""

from llmgw.pki.ca import CA_CERT, CA_KEY, NODE_ROLE, init_ca, issue, renew, validate_node_id
from llmgw.pki.tls import PeerIdentity, client_context, peer_identity, peer_node_id, server_context

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "NODE_ROLE",
    "PeerIdentity",
    "client_context",
    "init_ca",
    "issue",
    "peer_identity",
    "peer_node_id",
    "renew",
    "server_context",
    "validate_node_id",
]
