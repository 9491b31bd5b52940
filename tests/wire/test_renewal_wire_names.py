"""A renewal token is `lease` on the wire, as it was before the code called it a renewal's: what agents and control
planes of other releases send and read. The code's names (Renewal.token, DesiredState.renewal_token) never reach
the wire, and the wire's name is read into them."""

from __future__ import annotations

import json

from llmgw.wire.messages import DesiredState
from llmgw.wire.renewal import Renewal


def test_a_renewal_names_its_token_lease_on_the_wire() -> None:
    sent = json.loads(Renewal(node_id="n1", token="t1", etag="e1", loads=[]).model_dump_json())
    assert sent["lease"] == "t1" and "token" not in sent
    read = Renewal.model_validate_json('{"version": 11, "node_id": "n1", "lease": "t1", "etag": "e1"}')
    assert read.token == "t1"


def test_a_desired_state_names_its_renewal_token_lease_on_the_wire() -> None:
    sent = json.loads(DesiredState(node_id="n1", renewal_token="t1", etag="e1").model_dump_json())
    assert sent["lease"] == "t1" and "renewal_token" not in sent
    assert DesiredState.model_validate_json('{"node_id": "n1", "lease": "t1"}').renewal_token == "t1"
