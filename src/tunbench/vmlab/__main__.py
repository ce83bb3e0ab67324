"""`python -m tunbench.vmlab COMMAND`: manage the VM lab by hand.

  host-packages   print the Debian packages the host needs (for the Makefile / apt-get)
  build           build the image for the current recipe if it is not cached
  info            recipe hash, cache directory and disk used per cached image
  prune           delete cached images of other recipes
  run [-t S] [-- ARGV...]   boot and run ARGV in the guest (default: the tests/vmlab tier)
  sites           boot two guests as SSH sites, print the `tunbench run` options that reach
                  them, keep them up until Ctrl-C (or SIGTERM), then stop them
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from ..errors import TunbenchError
from . import image, sites, tier
from .qemu import boot


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tunbench.vmlab", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["host-packages", "build", "info", "prune", "run",
                                            "sites"])
    ap.add_argument("-t", "--timeout", type=float, default=900.0)
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.rest = rest
    try:
        return _dispatch(args)
    except TunbenchError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted: the VM and its temp files were removed", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "host-packages":
        print(" ".join(sorted(set(image.HOST_PACKAGES.values()))))
    elif args.command == "build":
        t0 = time.monotonic()
        img = image.ensure_image(timeout=args.timeout)
        print(f"{img.path} ({time.monotonic() - t0:.1f} s)")
    elif args.command == "info":
        info = {"recipe_hash": image.recipe_hash(), "cache": str(image.cache_root()),
                "usage_bytes": image.cache_usage()}
        print(json.dumps(info, indent=2))
    elif args.command == "prune":
        for name in image.prune():
            print(f"deleted {name}")
    elif args.command == "sites":
        return _serve_sites()
    elif args.rest:
        run = boot(image.ensure_image(), args.rest, timeout=args.timeout)
        sys.stdout.write(run.job_log)
        print(f"[guest exit {run.exit_code}; ready after {run.ready_seconds} s; "
              f"total {run.seconds} s; {run.boot_mode}/{run.accel}; "
              f"guest phases {run.status.get('phase_seconds')}]")
        return 0 if run.exit_code == 0 else 1
    else:
        t0 = time.monotonic()
        results = tier.run_tier(timeout=args.timeout)
        for r in results:
            print(f"{r.outcome.upper():8} {r.nodeid} ({r.duration:.1f} s) {r.message}")
        print(f"[{len(results)} guest tests in {time.monotonic() - t0:.1f} s]")
        return 0 if all(r.outcome in ("passed", "skipped") for r in results) else 1
    return 0


def _serve_sites() -> int:
    """Keep a pair up for a user's own `tunbench run --site ...`: SIGTERM ends it like Ctrl-C,
    so the guests are stopped and the keys removed either way."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with sites.site_pair() as pair:
        print(f"two guests serving SSH (booted in {pair.boot_seconds} s); in another shell:")
        print("  tunbench run " + " ".join(pair.site_args()) + " --tunnels native,geneve")
        print("Ctrl-C stops both guests and removes their keys.", flush=True)
        while all(s.process is not None and s.process.poll() is None
                  for s in pair.sites.values()):
            time.sleep(1.0)
        print("a guest stopped by itself; stopping the other", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
