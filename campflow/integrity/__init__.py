"""Reward integrity: no verifier enters the loop untested.

:mod:`~campflow.integrity.battery` plays scripted non-solutions through the rollout engine on every level
of a bootcamp and refuses a verifier that rewards one, naming the exploit and the instance;
:mod:`~campflow.integrity.hacker` has a model (``integrity.hacker``) try the same, told to earn the reward
without solving the task.
"""
