"""Recurring campaigns: a schedule definition (spec.py), its systemd timer + service
(systemd.py), and the firing/foreground loop with its overlap lock (fire.py)."""
