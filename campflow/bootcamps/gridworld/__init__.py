"""The ``gridworld`` bootcamp: grid navigation seen as an image each turn, with keys and doors.

bootcamp.py is the bootcamp (tools, reward, oracle); view.py holds its params and state, the map, and draws
and describes a frame.
"""

from campflow.bootcamps.gridworld.bootcamp import Gridworld

__all__ = ["Gridworld"]
