"""Bootcamps: families of executable agent tasks behind four layers (see base.py), and their registry."""
