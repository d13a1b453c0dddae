"""The ``calculator`` bootcamp: multi-step arithmetic word problems solved with a calculator tool.

bootcamp.py is the bootcamp (tools, reward, oracle). Its safe evaluator is shared with chart:
:mod:`campflow.bootcamps.arithmetic`.
"""

from campflow.bootcamps.calculator.bootcamp import Calculator

__all__ = ["Calculator"]
