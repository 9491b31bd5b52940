"""llmgw: one OpenAI-compatible endpoint over a cluster of GPU servers."""

__version__ = "0.1.0"
