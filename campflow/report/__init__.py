"""Cycle reports: the numbers people would rather see than read, plotted into an HTML page."""
