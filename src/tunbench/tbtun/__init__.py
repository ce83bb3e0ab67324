"""tbtun: the project's own rule-based eBPF tunnel (bpf/tbtun.bpf.c).

- `maps`: the byte layouts of bpf/tbtun.h (rules, settings, counters) and their parsing;
- `loader`: build check, bpffs, load + pin with bpftool, attach with tc, rule edits, teardown;
- `rules`: `tunbench tunnel-rules add|del|list` on a running site's pinned maps.

See docs/tbtun.md for the datapath and why it is built this way.
"""
