"""Chargeback: GPU time attributed to the keys that caused it, pure (docs/tenants.md, "Chargeback")."""

from llmgw.chargeback.model import Request, WindowCharges, charge_window, held_pieces

__all__ = ["Request", "WindowCharges", "charge_window", "held_pieces"]
