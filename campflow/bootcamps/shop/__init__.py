"""The ``shop`` bootcamp: find and buy the product a shopper describes.

bootcamp.py is the bootcamp (tools, reward, oracle); catalog.py holds its params and generates the catalog,
the goal and near misses.
"""

from campflow.bootcamps.shop.bootcamp import Shop

__all__ = ["Shop"]
