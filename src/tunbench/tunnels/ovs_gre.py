"""ovs-gre: Open vSwitch gre tunnel port (machinery in ovs.py)."""

from .ovs import make_driver

DRIVER = make_driver("gre")
