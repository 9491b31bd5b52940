"""Chargeback: GPU time attributed to the keys that caused it, pure (docs/tenants.md, "Chargeback")."""

from llmgw.chargeback.model import ChargedRequest, WindowCharges, charge_window, held_pieces

__all__ = ["ChargedRequest", "WindowCharges", "charge_window", "held_pieces"]
