"""Test doubles for the boundaries campflow cannot reach here: a real local OpenAI-compatible server."""
