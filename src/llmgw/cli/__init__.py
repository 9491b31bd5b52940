"""The `llmgw` command."""
