"""A planted environment whose rubric rewards any reply at all: campflow's import must refuse it."""

import verifiers as vf
from datasets import Dataset


def load_environment(**kwargs) -> vf.Environment:
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} * 3?"}], "answer": str(3 * i)} for i in range(8)]

    async def replied(completion) -> float:
        return 1.0 if completion else 0.0

    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[replied]))
