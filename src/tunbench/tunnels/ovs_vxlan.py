"""ovs-vxlan: Open vSwitch vxlan tunnel port (machinery in ovs.py)."""

from .ovs import make_driver

DRIVER = make_driver("vxlan")
