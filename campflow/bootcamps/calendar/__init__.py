"""The ``calendar`` bootcamp: carry out scheduling requests on a team calendar.

bootcamp.py is the bootcamp (tools, reward, oracle); schedule.py is its world: people, events, requests,
their checks and a planner.
"""

from campflow.bootcamps.calendar.bootcamp import Calendar

__all__ = ["Calendar"]
