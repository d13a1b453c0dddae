"""The ``maze`` bootcamp: grid navigation under partial observation.

bootcamp.py is the bootcamp (tools, reward, oracle).
"""

from campflow.bootcamps.maze.bootcamp import Maze

__all__ = ["Maze"]
