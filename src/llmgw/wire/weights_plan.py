"""How a file a node runs from is to be had (a shard's weights, its LoRA adapters'), decided by the control plane for
the whole fabric (control/nodes/weights.py). Apart from wire/messages.py, which names it, so wire/serving.py can too."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from llmgw.core.strict import Strict
from llmgw.wire.hub import MAX_FILES, HubFile, unique_files


class WeightsPeer(Strict):
    node_id: str  # the name its certificate must bear
    address: str
    port: int


class WeightsPlan(Strict):
    """How a shard's weights file is to be had, decided by the control plane for the whole fabric: copied from
    peers that hold it (in this order), else fetched from the origin, or waited for while one node of the fabric
    fetches it from the origin."""

    sha256: str = ""
    size: int | None = None
    peers: list[WeightsPeer] = []
    origin: bool = True
    wait_for: str = ""
    # version 10, for a hub source (wire/hub.py): the resolved commit's files, fetched from `base_url` (the hub's
    # `<endpoint>/<repo>/resolve/<commit>`) into one directory; the hub token for gated or private repositories,
    # sent only to the hub's own host (never to a peer, never in a log: repr=False)
    files: Annotated[list[HubFile], Field(max_length=MAX_FILES), AfterValidator(unique_files)] = []
    base_url: str = Field(default="", max_length=2048)
    token: str = Field(default="", repr=False, max_length=4096)
