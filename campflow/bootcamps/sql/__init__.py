"""The ``sql`` bootcamp: answer questions about a generated database with read-only SQL.

bootcamp.py is the bootcamp (tools, reward, oracle); world.py holds its params and generates the database
and questions with gold answers.
"""

from campflow.bootcamps.sql.bootcamp import Sql

__all__ = ["Sql"]
