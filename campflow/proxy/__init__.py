"""The recording proxy: an OpenAI-compatible endpoint in front of the policy, one URL per episode, that
records every call (the token ids the model saw and sampled included) before it answers (docs/proxy.md)."""
