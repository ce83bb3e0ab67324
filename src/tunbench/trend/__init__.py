"""`tunbench trend`: many campaigns from the results store (or result folders) by hour of day
and weekday, and as a time series with jumpavg change points (analysis.py, figures.py)."""
