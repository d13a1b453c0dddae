"""The rollout engine: episodes of policy turns, tool calls and observations, with terminations."""
