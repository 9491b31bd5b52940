from __future__ import annotations

import socket

from bench.addresses import loopback

from llmgw.agent.identity import node_id, route_address


def test_node_id_is_the_hostname_unless_written() -> None:
    assert node_id(None) == socket.gethostname()
    assert node_id("node07") == "node07"


def test_address_is_the_local_end_of_the_route_to_the_control_plane() -> None:
    assert route_address("https://127.0.0.1:7443") == "127.0.0.1"
    assert route_address(f"https://{loopback()}:7443") == "127.0.0.1"  # loopback's source for all of 127/8
