"""What a byte count implies about a packet count, for the live tiers (tests/netns,
tests/remote) that check a stream crossed a link by its interface's packet counters."""

from __future__ import annotations

# The largest skb an interface counts as one packet: a GSO or GRO super-packet of 64 KiB
MAX_SKB = 65536


def min_packets(nbytes: int) -> int:
    """The fewest packets that can have carried `nbytes`: an interface counts skbs, each at
    most MAX_SKB (GSO/GRO), so at least nbytes // MAX_SKB of them, and at least 1 (it did
    cross). A floor the stream's own bytes imply, not a guessed constant (`> 1000`)."""
    return max(nbytes // MAX_SKB, 1)
