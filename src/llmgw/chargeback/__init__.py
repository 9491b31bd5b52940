"""Chargeback: GPU time attributed to the keys that caused it, pure (docs/tenants.md, "Chargeback")."""

from llmgw.chargeback.model import Accounting, Request, account, held_pieces

__all__ = ["Accounting", "Request", "account", "held_pieces"]
