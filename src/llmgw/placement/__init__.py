"""Placement: pure and deterministic. place(request, snapshot) -> Placement | Refusal."""
