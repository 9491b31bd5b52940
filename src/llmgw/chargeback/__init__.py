"""Chargeback: GPU time attributed to the keys that caused it, pure (docs/tenants.md, "Chargeback")."""
