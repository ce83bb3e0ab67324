"""The tunbench agent: shipped to a remote site for a run (core.py runs there; client.py here)."""
