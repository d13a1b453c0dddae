"""Bootcamp modules as an LLM might write them, for the authoring tests: a good one and its faulty cousins.

``GOOD`` reverses a word (three levels, one final tool, an ``example_identity``). The others differ from
it in one place each, so a test says exactly which check must catch what.
"""

from __future__ import annotations

GOOD = '''
from pydantic import Field

from campflow.bootcamps.base import Action, Bootcamp, Observation, Params, Score, State, ToolArgs, tool
#SETUP


class ReverseParams(Params):
    length: int = Field(3, ge=1, le=30, description="letters in the word")


class AnswerArgs(ToolArgs):
    answer: str = Field(description="the word reversed")


class Reverse(Bootcamp[ReverseParams, State]):
    """Reverse a word.

    You are given a word. Submit it spelled backwards with `submit`.
    """

    name = "reverse"
    version = "1"
    params_model = ReverseParams
    levels = {1: ReverseParams(level=1, length=3), 2: ReverseParams(level=2, length=8),
              3: ReverseParams(level=3, length=16)}

    def build(self, params, rng):
        #BUILD
        return {"word": "".join(rng.choice("abcdefgh") for _ in range(params.length))}

    def prompt(self, instance):
        return self.chat(f"Reverse the word {instance.data['word']}.")

    @tool(final=True)
    def submit(self, instance, state, args: AnswerArgs) -> Observation:
        """Submit the reversed word."""
        state.answer = args.answer
        return Observation("Submitted.", final=True)

    def score(self, instance, state, transcript):
        ok = state.answer == instance.data["word"][::-1]
        return Score(float(ok), ok, {} if ok else {"reason": "mismatch"})

    def oracle(self, instance, state):
        word = instance.data["word"]
        #ORACLE
        return Action("submit", {"answer": word[::-1]})

    def wrong_answer(self, instance, state, rng):
        return Action("submit", {"answer": instance.data["word"]  + "x"})

    def example_identity(self, example_input):
        return {"word": example_input}
'''


def variant(*, setup: str = "", build: str = "", oracle: str = "") -> str:
    """``GOOD`` with code put in at module level (after the imports), at the top of build, or in the oracle."""
    return (
        GOOD.replace("#SETUP", setup.strip("\n"))
        .replace("        #BUILD", _indent(build, 8))
        .replace("        #ORACLE", _indent(oracle, 8))
    )


def _indent(code: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line if line else line for line in code.strip("\n").splitlines())


SYNTAX_ERROR = variant(setup="def broken(:\n    pass")
ORACLE_FAILS_AT_LEVEL_3 = variant(oracle="if len(word) > 10:\n    word = word[1:]  # drops a letter on long words")
HASH_SEEDED = variant(build='first = next(iter({"alpha", "beta", "gamma", "delta", "epsilon"}))\nrng.seed(first)')
NO_EXAMPLE_IDENTITY = GOOD.replace("def example_identity", "def unused_identity")


def reply(module: str, prose: str = "Here is the module.") -> str:
    """An assistant reply holding ``module`` in a python code block."""
    return f"{prose}\n\n```python\n{module.strip()}\n```\n"
