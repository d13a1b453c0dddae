"""A stateful tool environment written against verifiers' public API (not by campflow).

Each rollout has its own counter (``setup_state``); the ``add`` tool changes it, and its ``state``
argument is hidden from the model and filled in by ``update_tool_args``, as verifiers'
``StatefulToolEnv`` documents. The model must bring the counter to the row's target and reply with it;
the rubric checks the reply and the counter: a reply alone, without the tool calls, is not enough.
"""

import verifiers as vf
from datasets import Dataset


def add(amount: int, state: dict) -> str:
    """Add an amount to the counter and return the new value.

    Args:
        amount: how much to add (may be negative)
    """
    state["counter"] += amount
    return f"counter is now {state['counter']}"


class CounterEnv(vf.StatefulToolEnv):
    def __init__(self, **kwargs):
        super().__init__(tools=[], max_turns=6, **kwargs)
        self.add_tool(add, args_to_skip=["state"])

    async def setup_state(self, state, **kwargs):
        state["counter"] = 0
        return await super().setup_state(state, **kwargs)

    def update_tool_args(self, tool_name, tool_args, messages, state, **kwargs):
        if tool_name == "add":
            tool_args["state"] = state
        return tool_args


def load_environment(**kwargs) -> vf.Environment:
    rows = [
        {
            "prompt": [
                {
                    "role": "user",
                    "content": f"Use the add tool to bring the counter from 0 to {t}, then reply with the final value.",
                }
            ],
            "answer": str(t),
        }
        for t in (3, 5, 8, 13, 21, 34)
    ]

    async def counter_reached(completion, answer, state) -> float:
        reply = (completion[-1].content or "").strip() if completion else ""
        return 1.0 if state["counter"] == int(answer) and reply == answer else 0.0

    async def tool_was_used(completion) -> float:
        return 1.0 if any(getattr(m, "tool_calls", None) for m in completion) else 0.0

    rubric = vf.Rubric(funcs=[counter_reached, tool_was_used], weights=[1.0, 0.0])
    return CounterEnv(dataset=Dataset.from_list(rows), rubric=rubric)
