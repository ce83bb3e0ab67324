"""The VM lab's tiny boot pieces: a busybox initramfs (newc cpio, written here) and vmlinux.

The initramfs only loads what it needs to reach the ext4 root on virtio-blk (plus 9p, so the
guest init finds its shares without a module search), then switch_roots into the Debian rootfs.
Everything is pure Python: no cpio, no loop mounts, no root-only tools.
"""

from __future__ import annotations

import gzip
import io
import lzma
import stat
from pathlib import Path

from ..errors import UnavailableError

# Modules the initramfs loads, by name; their dependencies are resolved from modules.dep.
INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "crc32c_intel", "ext4",
                     "9pnet_virtio", "9p")

GUEST_INIT_PATH = "/sbin/tunbench-init"

INIT_SCRIPT = """#!/bin/busybox sh
# tunbench VM lab initramfs: load the modules for virtio-blk + ext4 + 9p, switch to the rootfs.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.order); do
  insmod /lib/modules/$m.ko 2>/dev/null || echo "tunbench-initramfs: insmod $m failed"
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
if ! mount -t ext4 /dev/vda /newroot; then
  echo "tunbench-initramfs: cannot mount the root filesystem /dev/vda"
  poweroff -f
fi
umount /proc /sys
mount -o move /dev /newroot/dev
exec switch_root /newroot GUEST_INIT
""".replace("GUEST_INIT", GUEST_INIT_PATH)


def _module_key(path: str) -> str:
    name = Path(path).name
    for suffix in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.replace("-", "_")


def resolve_modules(moddir: Path, wanted: tuple[str, ...]) -> list[Path]:
    """Module files for `wanted` and their dependencies, dependencies first (from modules.dep).

    Names that are built into the kernel (modules.builtin) or absent are skipped.
    """
    dep_file = moddir / "modules.dep"
    if not dep_file.exists():
        raise UnavailableError(f"{dep_file} is missing: the kernel package did not install",
                               "delete the VM lab cache directory and rebuild")
    deps: dict[str, tuple[str, list[str]]] = {}
    for line in dep_file.read_text().splitlines():
        if ":" not in line:
            continue
        mod, rest = line.split(":", 1)
        deps[_module_key(mod)] = (mod, rest.split())
    order: list[str] = []

    def visit(path: str) -> None:
        key = _module_key(path)
        if key in order or key not in deps:
            return
        for dep in deps[key][1]:
            visit(dep)
        order.append(key)

    for name in wanted:
        if name in deps:
            visit(deps[name][0])
    return [moddir / deps[key][0] for key in order]


def _read_module(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        raise UnavailableError(f"zstd-compressed module {path.name} is not supported",
                               "use a Debian release whose modules are .ko or .ko.xz")
    return data


class _Cpio:
    """Minimal writer of the newc cpio format the kernel unpacks as an initramfs."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)
               ) -> None:
        namez = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(namez), 0]
        self.ino += 1
        self.buf.write(b"070701" + b"".join(b"%08X" % f for f in fields) + namez)
        self.buf.write(b"\0" * (-(110 + len(namez)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dir(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, perm: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int) -> None:
        self._entry(name, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def is_static_elf(path: Path) -> bool:
    """True if an ELF executable has no program interpreter (PT_INTERP), i.e. is static."""
    data = path.read_bytes()[:65536]
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit only
        return False
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    for i in range(phnum):
        off = phoff + i * phentsize
        if int.from_bytes(data[off:off + 4], "little") == 3:  # PT_INTERP
            return False
    return True


def build_initramfs(busybox: Path, moddir: Path, out: Path) -> list[str]:
    """Write a gzip'd initramfs to `out`; return the module names it loads, in order."""
    if not is_static_elf(busybox):
        raise UnavailableError(f"{busybox} is not a static busybox",
                               "install it: apt-get install busybox-static")
    modules = resolve_modules(moddir, INITRAMFS_MODULES)
    cpio = _Cpio()
    for d in ("bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"):
        cpio.dir(d)
    cpio.chardev("dev/console", 5, 1)
    cpio.file("bin/busybox", busybox.read_bytes(), 0o755)
    cpio.symlink("bin/sh", "busybox")
    names = [_module_key(str(m)) for m in modules]
    for name, path in zip(names, modules, strict=True):
        cpio.file(f"lib/modules/{name}.ko", _read_module(path))
    cpio.file("modules.order", ("\n".join(names) + "\n").encode())
    cpio.file("init", INIT_SCRIPT.encode(), 0o755)
    out.write_bytes(gzip.compress(cpio.finish(), compresslevel=6))
    return names


def extract_vmlinux(vmlinuz: Path, out: Path) -> None:
    """Write the uncompressed ELF kernel found in a bzImage's xz (or gzip) payload."""
    data = vmlinuz.read_bytes()
    for magic, opener in ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gz")):
        start = data.find(magic)
        while start != -1:
            try:
                if opener == "xz":
                    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
                else:
                    elf = gzip.GzipFile(fileobj=io.BytesIO(data[start:])).read()
            except (lzma.LZMAError, OSError, EOFError):
                elf = b""
            if elf[:4] == b"\x7fELF":
                out.write_bytes(elf)
                return
            start = data.find(magic, start + 1)
    raise UnavailableError(f"no xz or gzip ELF payload found in {vmlinuz}",
                           "the VM lab boots the bzImage instead (slower)")


def has_pvh_note(vmlinux: Path) -> bool:
    """True if the ELF kernel carries XEN_ELFNOTE_PHYS32_ENTRY (qemu's PVH boot entry)."""
    data = vmlinux.read_bytes()
    if data[:4] != b"\x7fELF":
        return False
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    for i in range(phnum):
        ph = data[phoff + i * phentsize: phoff + (i + 1) * phentsize]
        if int.from_bytes(ph[0:4], "little") != 4:  # PT_NOTE
            continue
        off = int.from_bytes(ph[8:16], "little")
        size = int.from_bytes(ph[32:40], "little")
        pos, end = off, off + size
        while pos + 12 <= end:
            namesz, descsz, ntype = (int.from_bytes(data[pos + k:pos + k + 4], "little")
                                     for k in (0, 4, 8))
            name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == 18:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False
