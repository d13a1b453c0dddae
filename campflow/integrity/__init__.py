"""Reward integrity: no verifier enters the loop untested, no hacked success is promoted.

:mod:`~campflow.integrity.battery` plays scripted non-solutions through the rollout engine on every level
of a bootcamp and refuses a verifier that rewards one; :mod:`~campflow.integrity.suspicion` flags solved
episodes a human would check; :mod:`~campflow.integrity.rescore` scores stored episodes again with the
current verifier.
"""
