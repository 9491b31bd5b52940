"""Simulation: the `sim` engine, a real llmgw process that stands in for vLLM/SGLang where there are no GPUs.

`server.make_app` is its OpenAI-compatible HTTP app (also usable in-process), `rendezvous` how its ranks form a
group, `engine` the process entry point (`python -m llmgw.sim.engine`).
"""
