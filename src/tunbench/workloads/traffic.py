"""The shape of generated UDP traffic: packet size profiles (fixed, IMIX, custom weighted mixes,
RFC 6985 genome strings) and flow sets that vary the full 4-tuple.

Pure functions only, shared by the workloads that drive the load generator (loss-search) and by
the spec's validation, so a bad mix or genome is refused in one line before anything on the
system is changed. The generator (loadgen/) checks the same things again; these checks exist so
that the user reads the field's name and the fix instead of a failed case.

Sizes are IP total lengths (IP header included, no L2), as everywhere in tunbench's generator.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import reduce

# The IP and UDP headers of a datagram by IP family: an IP total length less these is payload
IP_UDP_HEADERS = {4: 20 + 8, 6: 40 + 8}
# RFC 6985 (IMIX Genome) size letters; `z` (interface MTU) and `x` (custom) need out-of-band
# sizes and are not accepted. The generator takes these sizes as IP total lengths.
GENOME_LETTERS = {"a": 64, "b": 128, "c": 256, "d": 512, "e": 1024, "f": 1280, "g": 1518,
                  "h": 2112, "i": 9000, "j": 16000}
SIMPLE_IMIX: tuple[tuple[int, int], ...] = ((40, 7), (576, 4), (1500, 1))
# IPv6 cannot carry a 40-byte packet: its smallest generator packet is 40 + 8 + 12 = 60 B, so
# the simple IMIX over IPv6 raises the small packets to that and keeps the rest
SIMPLE_IMIX6: tuple[tuple[int, int], ...] = ((60, 7), (576, 4), (1500, 1))
# Named mixes a `sizes` entry may give by name (IP total lengths). "micro": microservice
# traffic, 90 % of packets at most 200 B (RPC requests, replies, ACKs) and a tail up to 1280 B
# (the IPv6 minimum MTU, so every tunnel carries it unfragmented); mean 178.5 B. The smallest,
# 64 B, fits IPv6 too.
NAMED_MIXES = {"micro": "64:30,100:25,128:20,200:15,576:7,1280:3"}
NAMED_SIZES = ("imix", "mix", "genome", *NAMED_MIXES)
MIN_SIZE = {4: 20 + 8 + 12, 6: 40 + 8 + 12}   # IP + UDP + the generator's 12-byte header
MAX_SIZE = 9000                                 # jumbo frames; the generator takes up to 65535
MAX_CYCLE = 1 << 20                             # the generator's longest mix cycle / genome
_MIX_ITEM = re.compile(r"^\s*(\d+)\s*(?::\s*(\d+)\s*)?$")


def parse_mix(spec: str, field: str = "mix") -> tuple[tuple[int, int], ...]:
    """"64:7,570:4,1518:1" -> ((64, 7), (570, 4), (1518, 1)) (a bare size has weight 1).
    Raises ValueError naming `field` and the fix."""
    form = f'write SIZE:WEIGHT pairs, e.g. {field} = "64:7,570:4,1518:1"'
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{field} is empty: {form}")
    pairs: list[tuple[int, int]] = []
    for item in spec.split(","):
        m = _MIX_ITEM.match(item)
        if not m:
            raise ValueError(f"{field} element {item.strip()!r} is not SIZE or SIZE:WEIGHT: {form}")
        size, weight = int(m.group(1)), int(m.group(2) or 1)
        if not MIN_SIZE[4] <= size <= MAX_SIZE:
            raise ValueError(f"{field} size {size} out of range ({MIN_SIZE[4]}..{MAX_SIZE} bytes, "
                             f"IP total length; {MIN_SIZE[6]} at least over IPv6)")
        if weight < 1:
            raise ValueError(f"{field} weight of size {size} is 0: give it a weight >= 1 or "
                             "leave the size out")
        pairs.append((size, weight))
    if len({s for s, _ in pairs}) != len(pairs):
        raise ValueError(f"{field} lists a size twice: merge its weights into one SIZE:WEIGHT")
    g = reduce(math.gcd, (w for _, w in pairs))
    if sum(w // g for _, w in pairs) > MAX_CYCLE:
        raise ValueError(f"{field} weights add up to more than {MAX_CYCLE} packets per cycle "
                         "(after dividing by their gcd): use smaller weights")
    return tuple(pairs)


def parse_genome(spec: str, field: str = "genome") -> tuple[int, ...]:
    """"aaaaaaaabbbbg" -> the sizes in that order, by RFC 6985's letter table.
    Raises ValueError naming `field`, the offending letter and the fix."""
    table = ", ".join(f"{k}={v}" for k, v in GENOME_LETTERS.items())
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{field} is empty: write RFC 6985 letters, e.g. "
                         f'{field} = "aaaaaaaabbbbg" ({table})')
    letters = spec.strip().lower()
    for c in letters:
        if c in "zx":
            raise ValueError(f"{field} letter {c!r} (RFC 6985 {'interface MTU' if c == 'z' else 'custom size'}) "
                             "is not supported: use a size from the table or a mix "
                             f"(mix = \"SIZE:WEIGHT,...\"); letters: {table}")
        if c not in GENOME_LETTERS:
            raise ValueError(f"{field} letter {c!r} is not an RFC 6985 size letter: use {table}")
    if len(letters) > MAX_CYCLE:
        raise ValueError(f"{field} is longer than {MAX_CYCLE} letters: shorten it")
    return tuple(GENOME_LETTERS[c] for c in letters)


@dataclass(frozen=True)
class SizeProfile:
    """One packet size profile: its result key (e.g. "361", "imix", "mix", "genome") and the
    generator's arguments. `weights` are (size, weight); a genome's are its letter counts."""

    key: str
    args: tuple[str, ...]
    weights: tuple[tuple[int, int], ...]
    kind: str                       # fixed, imix, mix, genome
    spec: str = ""

    @property
    def mean_size(self) -> float:
        return sum(s * w for s, w in self.weights) / sum(w for _, w in self.weights)

    @property
    def min_size(self) -> int:
        return min(s for s, _ in self.weights)

    @property
    def max_size(self) -> int:
        return max(s for s, _ in self.weights)

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "kind": self.kind, "spec": self.spec,
                "weights": [list(p) for p in self.weights], "mean_size_l3": self.mean_size}


def profile(entry: str, family: int = 4, mix: str = "", genome: str = "") -> SizeProfile:
    """A `sizes` entry ("361", "imix", "mix", "genome") as the generator runs it over `family`.
    Raises ValueError when it cannot (a size below the family's minimum, "mix" without a mix)."""
    if entry == "imix":
        pairs = SIMPLE_IMIX if family == 4 else SIMPLE_IMIX6
        if family == 4:
            return SizeProfile("imix", ("--imix", "simple"), pairs, "imix", "simple")
        spec = ",".join(f"{s}:{w}" for s, w in pairs)
        return SizeProfile("imix", ("--mix", spec), pairs, "imix", spec)
    if entry in NAMED_MIXES:
        spec = NAMED_MIXES[entry]
        p = SizeProfile(entry, ("--mix", spec), parse_mix(spec), "mix", spec)
    elif entry == "mix":
        if not mix:
            raise ValueError('sizes lists "mix" but no mix is given: set mix = "SIZE:WEIGHT,..."')
        pairs = parse_mix(mix)
        p = SizeProfile("mix", ("--mix", mix.replace(" ", "")), pairs, "mix", mix)
    elif entry == "genome":
        if not genome:
            raise ValueError('sizes lists "genome" but no genome is given: set genome = '
                             '"LETTERS" (RFC 6985)')
        seq = parse_genome(genome)
        counts = {s: seq.count(s) for s in sorted(set(seq))}
        p = SizeProfile("genome", ("--genome", genome.strip().lower()),
                        tuple(counts.items()), "genome", genome.strip().lower())
    elif entry.isdigit():
        p = SizeProfile(str(int(entry)), ("--size", str(int(entry))), ((int(entry), 1),),
                        "fixed", str(int(entry)))
    else:
        raise ValueError(f'size {entry!r} must be an IP total length, "imix", "mix", "genome" '
                         f'or a named mix ({", ".join(NAMED_MIXES)})')
    if p.min_size < MIN_SIZE[family]:
        raise ValueError(f"size {p.min_size} B ({p.key}) is below the smallest IPv{family} packet "
                         f"the generator sends ({MIN_SIZE[family]} B: IP + UDP + its 12-byte "
                         "header): raise it")
    return p


MAX_ADDRS = 64                  # extra addresses per site a flow set may ask for (+ the own one)
_FLOWS_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class FlowSet:
    """Which 4-tuples the generator's flows use. `flows = N`: N source ports, one address each
    way, one destination port (the generator's classic flows). `flows = "SxDxSPxDP"`: S source
    and D destination addresses, SP source and DP destination ports, stepped together like the
    SD-WAN study's tester numbers its flows (flow i: source address i mod S, source port
    i mod SP, destination address i mod D, destination port i mod DP), so there are
    lcm(S, D, SP, DP) flows, each a distinct 4-tuple: "5x5x100x100" is the study's 100 flows."""

    src_addrs: int = 1
    dst_addrs: int = 1
    src_ports: int = 100
    dst_ports: int = 1
    classic: bool = True

    @property
    def count(self) -> int:
        return math.lcm(self.src_addrs, self.dst_addrs, self.src_ports, self.dst_ports)

    def src_port_base(self, dst_port: int) -> int | None:
        """Lockstep flows use fixed source ports, from 10000 like the study's Table 2 (above the
        destination ports when those reach that far): kernel-chosen ports may coincide across
        source addresses, and then fewer distinct ports are on the wire than asked for."""
        if self.classic:
            return None
        base = 10000
        if base <= dst_port + self.dst_ports - 1 and dst_port <= base + self.src_ports - 1:
            base = dst_port + self.dst_ports
        return base

    def describe(self) -> str:
        if self.classic:
            return f"{self.count} flows (source ports)"
        return (f"{self.count} flows: {self.src_addrs} source x {self.dst_addrs} destination "
                f"addresses, {self.src_ports} source x {self.dst_ports} destination ports")

    def to_dict(self) -> dict[str, object]:
        return {"flows": self.count, "src_addrs": self.src_addrs, "dst_addrs": self.dst_addrs,
                "src_ports": self.src_ports, "dst_ports": self.dst_ports,
                "stepping": "classic" if self.classic else "lockstep"}


def parse_flows(value: int | str, field: str = "flows") -> FlowSet:
    """100 -> 100 source ports; "5x5x100x100" -> the study's flows (see FlowSet). Raises
    ValueError naming `field` and the fix."""
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        n = int(value)
        if not 1 <= n <= 65535:
            raise ValueError(f"{field} {n} out of range (1..65535)")
        return FlowSet(1, 1, n, 1, classic=True)
    m = _FLOWS_RE.match(str(value))
    if not m:
        raise ValueError(f"{field} {value!r} is neither a count nor SxDxSPxDP: write e.g. "
                         f'{field} = 100 or {field} = "5x5x100x100" (source x destination '
                         "addresses x source x destination ports)")
    s, d, sp, dp = (int(g) for g in m.groups())
    if min(s, d, sp, dp) < 1:
        raise ValueError(f"{field} {value!r} has a count of 0: every count must be at least 1")
    if max(s, d) > MAX_ADDRS + 1:
        raise ValueError(f"{field} {value!r} asks for more than {MAX_ADDRS + 1} addresses per "
                         "site: use fewer addresses (and more ports)")
    fs = FlowSet(s, d, sp, dp, classic=False)
    if fs.count > 65535:
        raise ValueError(f"{field} {value!r} makes {fs.count} flows (the least common multiple "
                         "of the counts), more than 65535: use counts that divide each other")
    if dp > 65535 - 1024 or sp > 20000:
        raise ValueError(f"{field} {value!r}: at most 20000 source ports (from 10000) and "
                         "64511 destination ports (above 1024)")
    if math.lcm(s, sp, dp) % d:
        raise ValueError(f"{field} {value!r}: some flows would differ only in their destination "
                         "address, which the receiver cannot tell apart: give at least as many "
                         "ports as destination addresses (e.g. 5x5x100x100)")
    return fs
