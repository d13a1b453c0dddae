"""Prefect tasks: thin wrappers that run one pipeline step each."""
