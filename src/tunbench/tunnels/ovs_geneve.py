"""ovs-geneve: Open vSwitch geneve tunnel port (machinery in ovs.py)."""

from .ovs import make_driver

DRIVER = make_driver("geneve")
