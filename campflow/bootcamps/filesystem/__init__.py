"""The ``filesystem`` bootcamp: tidy an in-memory file tree by rules given in words.

bootcamp.py is the bootcamp (tools, reward, oracle); tree.py holds its params, the tree and the generator of
its tasks.
"""

from campflow.bootcamps.filesystem.bootcamp import Filesystem

__all__ = ["Filesystem"]
