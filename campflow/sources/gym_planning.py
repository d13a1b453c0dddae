"""Planners behind the Gymnasium oracles: value iteration on a known model, and blackjack strategy.

Toy-text environments publish their dynamics as ``env.unwrapped.P[s][a] = [(prob, next, reward,
terminated), ...]``. :func:`tabular_model` turns that table into arrays, :func:`value_iteration`
plans on it (discounted, so among equally good plans the shortest wins), and
:func:`expected_return` / :func:`steps_to_finish` measure the plan undiscounted over a turn budget,
which is what the reward is scaled against. Blackjack has no table; :func:`basic_strategy` is the
textbook hit/stick strategy, close to optimal for gymnasium's rules (no doubling or splitting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

GAMMA = 0.99
TOLERANCE = 1e-10
MAX_SWEEPS = 100_000


@dataclass(frozen=True)
class TabularModel:
    """A transition table as arrays of shape (states, actions, outcomes); ``prob`` is 0 for padding."""

    prob: np.ndarray
    next: np.ndarray
    reward: np.ndarray
    done: np.ndarray

    @property
    def deterministic(self) -> bool:
        """Whether every (state, action) has a single outcome."""
        return bool(np.all((self.prob == 0) | (self.prob == 1)) and np.all((self.prob > 0).sum(axis=2) == 1))

    @property
    def best_reward(self) -> float:
        """The largest one-step reward of any possible transition (the goal's, in toy-text tasks)."""
        return float(self.reward[self.prob > 0].max())

    @property
    def typical_reward(self) -> float:
        """The median one-step reward over possible transitions: the cost of an ordinary step."""
        return float(np.median(self.reward[self.prob > 0]))


Transitions = Mapping[int, Mapping[int, Sequence[tuple[float, int, float, bool]]]]


def tabular_model(P: Transitions, n_actions: int) -> TabularModel:
    """Arrays from a gymnasium ``P`` table."""
    n_states = len(P)
    width = max(len(P[s][a]) for s in range(n_states) for a in range(n_actions))
    shape = (n_states, n_actions, width)
    prob, nxt = np.zeros(shape), np.zeros(shape, dtype=np.int64)
    reward, done = np.zeros(shape), np.zeros(shape, dtype=bool)
    for s in range(n_states):
        for a in range(n_actions):
            for k, (p, s2, r, d) in enumerate(P[s][a]):
                prob[s, a, k], nxt[s, a, k], reward[s, a, k], done[s, a, k] = p, int(s2), r, bool(d)
    return TabularModel(prob, nxt, reward, done)


def value_iteration(model: TabularModel, gamma: float = GAMMA) -> np.ndarray:
    """A greedy optimal policy (one action per state) for the discounted model."""
    values = np.zeros(model.prob.shape[0])
    for _ in range(MAX_SWEEPS):
        q = _q_values(model, values, gamma)
        updated = q.max(axis=1)
        if np.max(np.abs(updated - values)) < TOLERANCE:
            values = updated
            break
        values = updated
    return _q_values(model, values, gamma).argmax(axis=1)


def _q_values(model: TabularModel, values: np.ndarray, gamma: float) -> np.ndarray:
    future = np.where(model.done, 0.0, values[model.next])
    return (model.prob * (model.reward + gamma * future)).sum(axis=2)


def expected_return(model: TabularModel, policy: np.ndarray, start: int, horizon: int) -> float:
    """Undiscounted expected return of ``policy`` from ``start`` within ``horizon`` steps."""
    states = np.arange(model.prob.shape[0])
    prob, nxt = model.prob[states, policy], model.next[states, policy]
    reward, done = model.reward[states, policy], model.done[states, policy]
    values = np.zeros(len(states))
    for _ in range(horizon):
        values = (prob * (reward + np.where(done, 0.0, values[nxt]))).sum(axis=1)
    return float(values[start])


def steps_to_finish(model: TabularModel, policy: np.ndarray, start: int, limit: int) -> int | None:
    """Steps ``policy`` takes from ``start`` to a terminal transition in a deterministic model (None: never)."""
    state = start
    for step in range(1, limit + 1):
        a = policy[state]
        if model.done[state, a, 0]:
            return step
        state = int(model.next[state, a, 0])
    return None


def basic_strategy(observation: Sequence[Any]) -> int:
    """Blackjack basic strategy on gymnasium's observation (total, dealer card, usable ace): 1 hit, 0 stick."""
    total, dealer, soft = int(observation[0]), int(observation[1]), bool(observation[2])
    up = 11 if dealer == 1 else dealer
    if soft:
        if total >= 19:
            return 0
        if total == 18:
            return 0 if up <= 8 else 1
        return 1
    if total >= 17:
        return 0
    if total >= 13:
        return 0 if up <= 6 else 1
    if total == 12:
        return 0 if 4 <= up <= 6 else 1
    return 1
