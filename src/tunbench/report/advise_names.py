"""The choices of advise's constraint options, in a module of their own so that building the
command line (cli.build_parser adds them to `advise` and `report`) does not import
report/advise.py and, behind it, scipy: every `tunbench` command (`tunnel-rules`, `list`,
`cleanup`) would otherwise pay ~2 s of imports before doing anything."""

# the figures a ranking can be by (`--by`; `--prefer` is its older name, and "latency" the
# older name of latency-p50)
BY = ("throughput", "throughput-best", "ndr", "pdr", "rfc2544", "latency-p50", "latency-p99",
      "cpu", "latency")
PREFER = BY
LOSS_GOALS = ("ndr", "pdr", "rfc2544")       # loss-search figures: packets/s per frame size
NEEDS = ("encryption",)
CARRIES = ("tcp", "udp", "l2")               # tunnels.base.CARRIES (not imported: no drivers)
