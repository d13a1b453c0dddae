"""The ``gui`` bootcamp: fill in a rendered app form by clicking, typing and scrolling.

bootcamp.py is the bootcamp (tools, reward, oracle); screen.py holds its params, state and layout, and draws
and describes a screen.
"""

from campflow.bootcamps.gui.bootcamp import Gui

__all__ = ["Gui"]
