"""Policies: the agents that play bootcamps (OpenAI-compatible endpoints, local models, oracles)."""
