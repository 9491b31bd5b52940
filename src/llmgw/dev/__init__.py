"""The embedded default cluster (`llmgw dev`), also used by integration tests to build real clusters."""
