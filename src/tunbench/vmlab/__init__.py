"""Full-kernel VM lab: a cached Debian image booted under qemu to run a test tier inside.

Public API: `ensure_image()`, `boot()`, `run_tier()` and their result types. See docs/vmlab.md.
"""
