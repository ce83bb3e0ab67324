"""The choices of advise's constraint options, in a module of their own so that building the
command line (cli.build_parser adds them to `advise` and `report`) does not import
report/advise.py and, behind it, scipy: every `tunbench` command (`tunnel-rules`, `list`,
`cleanup`) would otherwise pay ~2 s of imports before doing anything."""

PREFER = ("throughput", "latency", "cpu")
NEEDS = ("encryption",)
