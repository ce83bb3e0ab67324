"""ovs-stt: Open vSwitch stt tunnel port (machinery in ovs.py)."""

from .ovs import make_driver

DRIVER = make_driver("stt")
