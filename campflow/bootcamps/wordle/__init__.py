"""The ``wordle`` bootcamp: find a hidden 5-letter word from letter feedback.

bootcamp.py is the bootcamp (tools, reward, oracle).
"""

from campflow.bootcamps.wordle.bootcamp import Wordle

__all__ = ["Wordle"]
