"""Bootcamps: families of executable agent tasks behind four layers (see base.py), and their registry.

The layout tells bootcamps from the machinery they share:

- ``bootcamps/<name>/`` is the built-in bootcamp the registry calls ``<name>``, one package each:
  ``bootcamp.py`` is the bootcamp (the :class:`~campflow.bootcamps.base.Bootcamp` subclass: tools,
  reward, oracle), ``__init__.py`` exports that class, and any other module beside them is a helper
  of that bootcamp alone (``gui/screen.py``, ``sql/world.py``), usually holding its params model.
- modules directly in ``bootcamps/`` are shared by every bootcamp or by several: the interface
  (``base.py``, ``values.py``, ``schemas.py``, ``messages.py``), the registry, the property checks
  (``contract.py``), the splits, the image helpers (``rendering.py``) and the safe evaluator that
  calculator and chart both use (``arithmetic.py``).
- other people's tasks, turned into bootcamps by ``campflow import``, come from :mod:`campflow.sources`.
"""
