"""A custom multi-turn protocol written against verifiers' public API (not by campflow): a tutoring dialogue.

Each row asks a multiplication and has an ``answer`` column. The model replies with a number; the
environment's own ``env_response`` says whether it is right and, where not, whether it is too high or too
low, and lets it try again, up to three attempts (``max_turns``). A ``@vf.stop`` condition ends the
rollout once an attempt is right. The rubric reads the last reply, a whole number: full credit for a
right first attempt, half for a right second one, a third for a third.
"""

import verifiers as vf
from datasets import Dataset

ATTEMPTS = 3


class TutorEnv(vf.MultiTurnEnv):
    def __init__(self, **kwargs):
        super().__init__(max_turns=ATTEMPTS, **kwargs)

    async def setup_state(self, state, **kwargs):
        state["solved"] = False
        return await super().setup_state(state, **kwargs)

    @vf.stop
    async def answered_right(self, state) -> bool:
        return state["solved"]

    async def env_response(self, messages, state, **kwargs) -> vf.Messages:
        guess = (self.parser.parse_answer(messages) or "").strip()
        if not guess.lstrip("-").isdigit():
            return [{"role": "user", "content": "Reply with a whole number only."}]
        if guess == state["answer"]:
            state["solved"] = True
            return [{"role": "user", "content": "Correct."}]
        hint = "too high" if int(guess) > int(state["answer"]) else "too low"
        return [{"role": "user", "content": f"Not quite: {guess} is {hint}. Try again."}]


def load_environment(**kwargs) -> vf.Environment:
    pairs = [(a, b) for a in range(2, 9) for b in (3, 7, 11)]
    rows = [
        {"question": f"What is {a} * {b}? Reply with the number only.", "answer": str(a * b), "info": {"a": a}}
        for a, b in pairs
    ]
    eval_rows = [
        {"question": f"What is {a} * {b}? Reply with the number only.", "answer": str(a * b), "info": {"a": a}}
        for a, b in ((12, 13), (14, 3), (15, 4))
    ]
    parser = vf.Parser()

    async def right_answer(parser, completion, answer) -> float:
        replies = parser.get_assistant_messages(completion)
        reply = (parser.parse_answer(completion) or "").strip()
        right = reply.lstrip("-").isdigit() and reply == answer
        return 1.0 / len(replies) if right and replies else 0.0

    async def attempts(parser, completion) -> float:
        return float(len(parser.get_assistant_messages(completion)))

    rubric = vf.Rubric(funcs=[right_answer, attempts], weights=[1.0, 0.0], parser=parser)
    return TutorEnv(
        dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(eval_rows),
        system_prompt="You are being tutored in arithmetic.",
        parser=parser,
        rubric=rubric,
    )
