"""wordle: find a hidden 5-letter word from green/yellow/gray letter feedback."""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from pydantic import Field, model_validator

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Exemptions,
    Instance,
    NoArgs,
    Observation,
    Params,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.bootcamps.messages import clip
from campflow.errors import InvalidParamsError, ToolError

GREEN, YELLOW, GRAY = 2, 1, 0
_COLOR_NAMES = {GREEN: "green", YELLOW: "yellow", GRAY: "gray"}
SOLVED = 242  # every position green, as a base-3 code
SHOWN_CANDIDATES_MAX = 200  # a longer list would crowd the prompt
OPENERS_TRIED = 30  # guesses the solver weighs per decision; more buys nothing measurable on words.txt


@functools.cache
def word_list() -> tuple[str, ...]:
    """The shipped word list (campflow/data/words.txt), most common words first."""
    text = resources.files("campflow").joinpath("data/words.txt").read_text(encoding="utf-8")
    words = tuple(w.strip() for w in text.splitlines() if w.strip())
    bad = [w for w in words if len(w) != 5 or not (w.isascii() and w.isalpha() and w.islower())]
    if bad or len(set(words)) != len(words):
        raise ValueError(f"campflow/data/words.txt must hold distinct lowercase 5-letter words; bad: {bad[:5]}")
    return words


@functools.cache
def _dictionary() -> frozenset[str]:
    return frozenset(word_list())


def feedback(guess: str, target: str) -> int:
    """Wordle feedback as a base-3 code (position i weighs 3**i; 2 green, 1 yellow, 0 gray).

    Duplicate letters follow the game: greens are matched first, then each remaining letter of the
    target turns at most one more guess letter yellow, left to right.
    """
    if guess == target:
        return SOLVED
    unmatched = [t for g, t in zip(guess, target) if g != t]
    code, weight = 0, 1
    for g, t in zip(guess, target):
        if g == t:
            code += GREEN * weight
        elif g in unmatched:
            code += YELLOW * weight
            unmatched.remove(g)
        weight *= 3
    return code


def colors(code: int) -> list[int]:
    """The per-letter colors of a feedback code, position 0 first."""
    return [(code // 3**i) % 3 for i in range(5)]


def render(guess: str, code: int) -> str:
    """Feedback as the agent reads it: ``c=gray r=yellow a=green n=gray e=gray``."""
    return " ".join(f"{ch}={_COLOR_NAMES[c]}" for ch, c in zip(guess, colors(code)))


class WordleParams(Params):
    """Knobs of a wordle game."""

    vocabulary: int = Field(
        40, ge=10, le=len(word_list()), description="the hidden word is one of this many most common words of the list"
    )
    max_guesses: int = Field(6, ge=3, le=10, description="guesses allowed, the winning one included")
    hard_mode: bool = Field(False, description="every guess must reuse the greens in place and the yellows revealed")
    show_candidates: bool = Field(False, description="list the possible hidden words in the prompt")

    @model_validator(mode="after")
    def _short_list_only(self) -> WordleParams:
        if self.show_candidates and self.vocabulary > SHOWN_CANDIDATES_MAX:
            raise ValueError(f"show_candidates needs vocabulary <= {SHOWN_CANDIDATES_MAX}, got {self.vocabulary}")
        return self


class GuessArgs(ToolArgs):
    """Arguments of guess."""

    word: str = Field(description="a 5-letter English word from the game's dictionary")


@dataclass
class WordleState(State):
    """The guesses so far and their feedback codes."""

    guesses: list[str] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    solved: bool = False


class Wordle(Bootcamp[WordleParams, WordleState]):
    """Find the hidden 5-letter English word in a limited number of guesses.

    Call `guess` with a 5-letter word from the dictionary. Each letter comes back green (right letter,
    right place), yellow (in the word, elsewhere) or gray (not in the word, or no more copies of it).
    A letter repeated in your guess is yellow only as often as the hidden word has it left over after
    the greens. In hard mode every guess must keep the green letters in place and use every yellow
    letter. The episode ends when you find the word or run out of guesses (or call `give_up`).

    Levels grow the pool of possible words (40 listed in the prompt, then 200, 500 and all 1,162 of
    campflow/data/words.txt, most common first), and switch on hard mode; each level's budget covers
    the reference solver's worst case (with a smaller synthesized budget, the hidden word is drawn
    among the words the solver finds within it). Reward is 1 for solving
    within par (the reference solver's guess count for this word), minus 0.1 per extra guess down to
    0.5, and 0 for not solving (reasons `out_of_guesses`, `gave_up`). Bump `version` when words.txt changes.
    """

    name = "wordle"
    version = "1"
    # a guess is a free choice among the vocabulary the prompt names (the oracle reads only the feedback)
    grounding = Exemptions(fields=frozenset({("guess", "word")}))
    params_model = WordleParams
    state_model = WordleState
    levels = {
        1: WordleParams(level=1, vocabulary=40, max_guesses=6, show_candidates=True),
        2: WordleParams(level=2, vocabulary=200, max_guesses=6),
        3: WordleParams(level=3, vocabulary=500, max_guesses=6, hard_mode=True),
        4: WordleParams(level=4, vocabulary=len(word_list()), max_guesses=7, hard_mode=True),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: WordleParams, rng: random.Random) -> dict[str, Any]:
        # Every level's budget covers the solver's worst case; a synthesized budget below it keeps only
        # the words the solver finds in time, so the oracle still proves every instance solvable.
        pool = word_list()[: params.vocabulary]
        for _ in range(64):
            target = rng.choice(pool)
            par = solver_guesses(params.vocabulary, target)
            if par <= params.max_guesses:
                return {"target": target, "par": par}
        raise InvalidParamsError(
            f"wordle: max_guesses = {params.max_guesses} is too few for a pool of "
            f"{params.vocabulary} words; expected more guesses or a smaller vocabulary"
        )

    def prompt(self, instance: Instance[WordleParams]) -> list[dict[str, Any]]:
        p = instance.params
        text = (
            f"Find the hidden word in at most {p.max_guesses} guesses. It is one of the "
            f"{p.vocabulary} most common 5-letter words in the dictionary."
        )
        if p.hard_mode:
            text += " Hard mode is on."
        if p.show_candidates:
            text += " The possible words are: " + ", ".join(sorted(word_list()[: p.vocabulary])) + "."
        return self.chat(text)

    def max_turns(self, instance: Instance[WordleParams]) -> int:
        return instance.params.max_guesses + 4  # room for a few refused guesses

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def guess(self, instance: Instance, state: WordleState, args: GuessArgs) -> Observation:
        """Guess a 5-letter word; ends the episode when it is right or no guesses are left."""
        p = instance.params
        word = _valid_word(args.word)
        if p.hard_mode:
            _check_hard_mode(word, state)
        code = feedback(word, instance.data["target"])
        state.guesses.append(word)
        state.codes.append(code)
        left = p.max_guesses - len(state.guesses)
        if code == SOLVED:
            state.solved = True
            return Observation(f"{render(word, code)}\nSolved in {len(state.guesses)} guess(es).", final=True)
        if left == 0:
            return Observation(
                f"{render(word, code)}\nNo guesses left; the word was {instance.data['target']!r}.", final=True
            )
        return Observation(f"{render(word, code)}\n{left} guess(es) left.")

    @tool(final=True)
    def give_up(self, instance: Instance, state: WordleState, args: NoArgs) -> Observation:
        """Stop guessing and reveal the word. This ends the episode unsolved."""
        state.answer = "gave_up"
        return Observation(f"You gave up; the word was {instance.data['target']!r}.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: WordleState, transcript: Any) -> Score:
        used, par = len(state.guesses), instance.data["par"]
        if not state.solved:
            reason = (
                "gave_up"
                if state.answer == "gave_up"
                else "out_of_guesses"
                if used >= instance.params.max_guesses
                else "unfinished"
            )
            return Score(0.0, False, {"reason": reason, "guesses": used, "par": par})
        reward = 1.0 if used <= par else max(0.5, 1.0 - 0.1 * (used - par))
        return Score(round(reward, 6), True, {"guesses": used, "par": par})

    # -- oracle ----------------------------------------------------------------------------------

    # demonstrate() is the oracle: it reads only the pool size the prompt names and the feedback shown,
    # never the target; a guess is the agent's own choice of word.
    def oracle(self, instance: Instance, state: WordleState) -> Action:
        # Reads only the public pool size and the feedback seen so far, never the target.
        history = tuple(zip(state.guesses, state.codes))
        return Action("guess", {"word": _solver_node(instance.params.vocabulary, history)[1]})

    def perturb(self, instance: Instance, state: WordleState, action: Action, rng: random.Random) -> Action:
        target = instance.data["target"]
        if instance.params.hard_mode and state.guesses:
            return Action("guess", {"word": state.guesses[-1]})  # the one wrong guess hard mode always accepts
        pool = word_list()[: instance.params.vocabulary]
        return Action("guess", {"word": rng.choice([w for w in pool if w != target])})

    def wrong_answer(self, instance: Instance, state: WordleState, rng: random.Random) -> Action:
        # Running out of guesses is the failure worth mining (giving up teaches nothing), so a wrong
        # answer spends every guess on a wrong word: repeating the last guess always satisfies hard
        # mode, and the last guess ends the episode.
        if state.guesses:
            return Action("guess", {"word": state.guesses[-1]})
        target = instance.data["target"]
        return Action("guess", {"word": rng.choice([w for w in word_list()[:50] if w != target])})


def _valid_word(raw: str) -> str:
    word = raw.strip().lower()
    if len(word) != 5 or not (word.isascii() and word.isalpha()):
        shown = clip(raw, 40)
        raise ToolError(f"guess {shown!r} ({len(raw)} characters) is not a word; expected 5 letters a-z")
    if word not in _dictionary():
        raise ToolError(f"{word!r} is not in the dictionary; expected a common 5-letter English word")
    return word


def _check_hard_mode(word: str, state: WordleState) -> None:
    for prev, code in zip(state.guesses, state.codes):
        cs = colors(code)
        for i, (ch, c) in enumerate(zip(prev, cs)):
            if c == GREEN and word[i] != ch:
                raise ToolError(f"hard mode: {word!r} must have {ch!r} at position {i + 1}, as {prev!r} showed")
        for ch in set(prev):
            needed = sum(1 for p, c in zip(prev, cs) if p == ch and c != GRAY)
            if word.count(ch) < needed:
                raise ToolError(
                    f"hard mode: {word!r} must contain {ch!r} at least {needed} time(s), as {prev!r} showed"
                )


def _choose(candidates: tuple[str, ...]) -> str:
    """A consistent candidate that splits the rest best: smallest worst-case, then expected, group."""
    if len(candidates) <= 2:
        return candidates[0]
    counts: dict[str, int] = {}
    for w in candidates:
        for ch in set(w):
            counts[ch] = counts.get(ch, 0) + 1
    # Weigh only the candidates with the most common distinct letters: an all-pairs search is quadratic.
    order = sorted(range(len(candidates)), key=lambda i: (-sum(counts[c] for c in set(candidates[i])), i))
    best: tuple[tuple[int, int, int], str] | None = None
    for i in order[:OPENERS_TRIED]:
        g = candidates[i]
        groups: dict[int, int] = {}
        for t in candidates:
            f = feedback(g, t)
            groups[f] = groups.get(f, 0) + 1
        key = (max(groups.values()), sum(v * v for v in groups.values()), i)
        if best is None or key < best[0]:
            best = (key, g)
    assert best is not None
    return best[1]


@functools.lru_cache(maxsize=1 << 16)
def _solver_node(vocabulary: int, history: tuple[tuple[str, int], ...]) -> tuple[tuple[str, ...], str]:
    """The words consistent with ``history`` and the solver's next guess (memoized: a decision tree)."""
    if not history:
        candidates = word_list()[:vocabulary]
    else:
        previous = _solver_node(vocabulary, history[:-1])[0]
        guess, code = history[-1]
        candidates = tuple(t for t in previous if feedback(guess, t) == code)
    if not candidates:
        raise ValueError(f"no word among the {vocabulary} most common is consistent with {history}")
    return candidates, _choose(candidates)


def solver_guesses(vocabulary: int, target: str) -> int:
    """How many guesses the reference solver needs for ``target`` in a pool of ``vocabulary`` words."""
    history: tuple[tuple[str, int], ...] = ()
    while True:
        guess = _solver_node(vocabulary, history)[1]
        code = feedback(guess, target)
        if code == SOLVED:
            return len(history) + 1
        history += ((guess, code),)
