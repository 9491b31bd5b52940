"""The base of every model llmgw reads from outside itself (the configuration files, the agent protocol, what it
stores): a key the model does not know is refused, never ignored, so a misspelt key is an error in words rather
than a default quietly taken."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Frozen(Strict):
    """Strict, and immutable once made: engine sources and hub files are compared and hashed as values."""

    model_config = ConfigDict(frozen=True)  # merged with Strict's: extra keys still refused
