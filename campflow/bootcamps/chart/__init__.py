"""The ``chart`` bootcamp: read values off a rendered chart and compute an answer from them.

bootcamp.py is the bootcamp (tools, reward, oracle); draw.py holds its params and draws (PNG) and describes
(text) the chart.
"""

from campflow.bootcamps.chart.bootcamp import Chart

__all__ = ["Chart"]
