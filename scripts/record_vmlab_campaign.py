"""Record a real campaign inside the VM lab guest into a folder (e.g. tests/data/campaigns/X).

For what this host's kernel cannot run (netem: the RTT and loss axes), the campaign runs in
the VM lab's Debian kernel: `tunbench run ARGS --no-report --out /results/c` is the guest's
job, and the campaign's text files come back through the results share. The case files to
bring back are named by the plan of the same arguments, made here for a kernel with netem
(the guest's: sch_netem is loaded there before the job).

    PYTHONPATH=src .venv/bin/python scripts/record_vmlab_campaign.py tests/data/campaigns/rtt \\
        -- --rtts 0ms,10ms,40ms --losses 0%,1% --tunnels native,vxlan --workloads stream \\
           --duration 2 --warmup 0 --repeats 1

Run it under the machine's locks (flock /work/live.lock flock -s /work/quiet.lock ...).
TCG runs 25-30x slower than the host: the figures show the report's shape on real data, not
the methods' (docs/vmlab.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tunbench import capabilities, cli, plan
from tunbench.vmlab import image, qemu


class GuestKernel:
    """The VM lab guest's kernel as the plan's checks see it: netem as a module (loaded)."""

    where, release = "the VM lab guest", "Debian bookworm"

    def kernel_config(self) -> dict[str, str]:
        return {"CONFIG_NET_SCH_NETEM": "m"}

    def has_tool(self, tool: str) -> bool:
        return True


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out, rest = Path(argv[0]), argv[2:]
    if out.exists():
        print(f"{out} exists: choose a new folder", file=sys.stderr)
        return 2
    with capabilities.viewing(GuestKernel()):
        exp = cli.spec_from_args(cli.build_parser().parse_args(["run", *rest]))
    ids = [c.case_id for c in plan.plan(exp)]
    names = ("c/index.json",) + tuple(f"c/cases/{i}.json" for i in ids)
    run = qemu.boot(image.ensure_image(),
                    ["python3", "-m", "tunbench", "run", *rest, "--no-report", "--json",
                     "--out", "/results/c"], timeout=1800.0, collect=names)
    sys.stdout.write(run.job_log[-4000:])
    missing = [n for n in names if n not in run.files]
    if run.exit_code != 0 or missing:
        print(f"guest exit {run.exit_code}; missing {missing}", file=sys.stderr)
        return 1
    for name, text in run.files.items():
        dest = out / name.removeprefix("c/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    index = json.loads((out / "index.json").read_text())
    print(f"recorded {len(ids)} cases in {out} ({run.seconds} s in the guest; statuses "
          f"{sorted({c['status'] for c in index['cases']})})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
