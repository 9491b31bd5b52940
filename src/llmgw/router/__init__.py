"""The OpenAI-compatible API: keys, routing, streaming pass-through, on-demand loads, usage."""
