"""A single-turn math environment written the way verifiers' documentation writes one (not by campflow).

Rows have a ``prompt`` (chat messages) and an ``answer`` column; the rubric reads the model's final reply
through a ``vf.Parser`` and compares it with the answer exactly. ``eval_dataset`` holds rows of its own.
"""

import verifiers as vf
from datasets import Dataset


def _rows(pairs):
    return [
        {
            "prompt": [{"role": "user", "content": f"What is {a} + {b}? Reply with the number only."}],
            "answer": str(a + b),
        }
        for a, b in pairs
    ]


def load_environment(n: int = 12, **kwargs) -> vf.Environment:
    dataset = Dataset.from_list(_rows([(i, 2 * i + 3) for i in range(n)]))
    eval_dataset = Dataset.from_list(_rows([(100 + i, 7 * i) for i in range(4)]))
    parser = vf.Parser()

    async def exact_answer(parser, completion, answer) -> float:
        response = (parser.parse_answer(completion) or "").strip()
        return 1.0 if response == answer.strip() else 0.0

    rubric = vf.Rubric(funcs=[exact_answer], weights=[1.0], parser=parser)
    return vf.SingleTurnEnv(
        dataset=dataset,
        eval_dataset=eval_dataset,
        system_prompt="Add the numbers.",
        parser=parser,
        rubric=rubric,
    )
