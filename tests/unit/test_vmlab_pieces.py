"""Unit tests (no root, no qemu) for the VM lab's pure pieces."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench.errors import UnavailableError
from tunbench.vmlab import image, initramfs, qemu, tier

DATA = Path(__file__).resolve().parents[1] / "data" / "vmlab"


def _cpio_entries(blob: bytes) -> dict[str, tuple[int, bytes]]:
    """Minimal newc reader: name -> (mode, data)."""
    out, pos = {}, 0
    while True:
        assert blob[pos:pos + 6] == b"070701"
        fields = [int(blob[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name_start = pos + 110
        name = blob[name_start:name_start + namesize - 1].decode()
        data_start = name_start + namesize + (-(110 + namesize) % 4)
        data = blob[data_start:data_start + size]
        pos = data_start + size + (-size % 4)
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, data)


def test_cpio_newc_roundtrip() -> None:
    c = initramfs._Cpio()
    c.dir("bin")
    c.file("init", b"#!/bin/sh\n", 0o755)
    c.file("odd", b"abcde")
    c.symlink("bin/sh", "busybox")
    c.chardev("dev/console", 5, 1)
    entries = _cpio_entries(c.finish())
    assert entries["init"] == (0o100755, b"#!/bin/sh\n")
    assert entries["odd"][1] == b"abcde"
    assert entries["bin/sh"] == (0o120777, b"busybox")
    assert entries["dev/console"][0] == 0o020600


def test_resolve_modules_orders_dependencies(tmp_path: Path) -> None:
    (tmp_path / "modules.dep").write_text(
        "kernel/fs/ext4/ext4.ko.xz: kernel/fs/jbd2/jbd2.ko.xz kernel/lib/crc16.ko.xz\n"
        "kernel/fs/jbd2/jbd2.ko.xz:\n"
        "kernel/lib/crc16.ko.xz:\n"
        "kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/virtio.ko\n"
        "kernel/net/9p/9pnet.ko:\n"
        "kernel/virtio.ko:\n")
    mods = initramfs.resolve_modules(tmp_path, ("ext4", "9pnet_virtio", "absent"))
    names = [initramfs._module_key(str(m)) for m in mods]
    assert names == ["jbd2", "crc16", "ext4", "9pnet", "virtio", "9pnet_virtio"]


def test_static_elf_detection() -> None:
    assert not initramfs.is_static_elf(Path(__file__))  # not an ELF at all
    if Path("/bin/sh").exists():
        assert not initramfs.is_static_elf(Path("/bin/sh").resolve())  # dynamic dash


def test_initramfs_init_switches_to_guest_init() -> None:
    assert initramfs.INIT_SCRIPT.rstrip().endswith(f"switch_root /newroot "
                                                   f"{initramfs.GUEST_INIT_PATH}")


def test_recipe_hash_is_stable_and_covers_packages(monkeypatch) -> None:
    h = image.recipe_hash()
    assert h == image.recipe_hash() and len(h) == 16
    monkeypatch.setattr(image, "GUEST_PACKAGES", (*image.GUEST_PACKAGES, "extra-pkg"))
    assert image.recipe_hash() != h


def test_cache_root_env(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(image.CACHE_ENV, str(tmp_path))
    assert image.cache_root() == tmp_path
    assert image.load(tmp_path / "nothing") is None


def test_qemu_argv_has_no_outside_network(tmp_path: Path) -> None:
    img = image.Image(tmp_path, "6.1.0-x", "3.11", True)
    argv = qemu.qemu_argv("qemu-system-x86_64", img, boot_mode="pvh", accel_kind="tcg",
                          console=tmp_path / "c.log",
                          shares={"tbtree": (tmp_path, True), "tbresults": (tmp_path, False)})
    joined = " ".join(argv)
    assert argv[argv.index("-nic") + 1] == "none"
    assert "-netdev" not in argv and "user" not in joined.split(",")
    assert "cryptomgr.notests" in argv[argv.index("-append") + 1]
    assert "snapshot=on" in argv[argv.index("-drive") + 1]
    assert argv[argv.index("-kernel") + 1].endswith("vmlinux")
    virtfs = [argv[i + 1] for i, a in enumerate(argv) if a == "-virtfs"]
    assert any("mount_tag=tbtree" in v and "readonly=on" in v for v in virtfs)
    assert any("mount_tag=tbresults" in v and "readonly" not in v for v in virtfs)


def test_parse_junit_captured_guest_output() -> None:
    xml = (DATA / "junit_guest.xml").read_text()
    root = Path(__file__).resolve().parents[2]
    results = {r.nodeid: r for r in tier.parse_junit(xml, root)}
    assert results, "no testcases parsed"
    for nodeid in results:
        assert nodeid.startswith("tests/vmlab/") and "::" in nodeid
    fails = results["tests/vmlab/test_zz_capture_tmp.py::test_fails"]
    assert fails.outcome == "failed" and fails.message.startswith("AssertionError")
    assert "kernel in guest: 6.1.0" in fails.output
    assert "Captured Log" not in fails.output  # empty sections dropped
    skip = results["tests/vmlab/test_zz_capture_tmp.py::test_skips"]
    assert skip.outcome == "skipped" and skip.message == "no such feature in this guest"
    assert results["tests/vmlab/test_zz_capture_tmp.py::test_param[2]"].outcome == "passed"
    assert results["tests/vmlab/test_smoke.py::test_geneve"].output == ""


def test_parse_junit_outcomes(tmp_path: Path) -> None:
    xml = """<?xml version="1.0"?><testsuites><testsuite name="pytest">
    <testcase classname="tests.vmlab.test_x" name="test_ok" time="0.5"/>
    <testcase classname="tests.vmlab.test_x" name="test_bad[1]" time="1">
      <failure message="assert 1 == 2">long text</failure>
      <system-out>hello</system-out></testcase>
    <testcase classname="tests.vmlab.test_x.TestC" name="test_skip" time="0">
      <skipped type="pytest.skip" message="no module">reason</skipped></testcase>
    </testsuite></testsuites>"""
    (tmp_path / "tests" / "vmlab").mkdir(parents=True)
    (tmp_path / "tests" / "vmlab" / "test_x.py").write_text("")
    r = tier.parse_junit(xml, tmp_path)
    assert [x.nodeid for x in r] == ["tests/vmlab/test_x.py::test_ok",
                                     "tests/vmlab/test_x.py::test_bad[1]",
                                     "tests/vmlab/test_x.py::TestC::test_skip"]
    assert [x.outcome for x in r] == ["passed", "failed", "skipped"]
    assert r[1].message == "assert 1 == 2" and "hello" in r[1].output
    assert r[2].message == "no module"


def test_missing_host_tools_name_the_packages(monkeypatch) -> None:
    monkeypatch.setattr(image.proc, "which",
                        lambda tool: None if tool in ("debootstrap", "busybox") else "/x")
    with pytest.raises(UnavailableError) as exc:
        image.check_host()
    assert "apt-get install busybox-static debootstrap" in exc.value.hint


def test_the_tree_is_byte_compiled_for_a_guest_python_of_this_version(tmp_path: Path) -> None:
    """The guest reads the tree read-only without writing bytecode: the host compiles src/
    (each module's current .pyc, which a Python of this version imports as it is), and does
    nothing for a guest Python of another version, which would not read it."""
    import importlib.util
    import subprocess
    import sys
    mod = tmp_path / "src" / "tbpkg" / "mod.py"
    mod.parent.mkdir(parents=True)
    (mod.parent / "__init__.py").write_text("")
    mod.write_text("VALUE = 42\n")
    pyc = Path(importlib.util.cache_from_source(str(mod)))
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    qemu.compile_tree(tmp_path, image.Image(tmp_path, "6.1.0", "2.7", False))
    assert not pyc.exists()
    qemu.compile_tree(tmp_path, image.Image(tmp_path, "6.1.0", here, False))
    assert pyc.exists()
    code = "import tbpkg.mod as m; print(m.__spec__.cached, m.VALUE)"
    r = subprocess.run([sys.executable, "-B", "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path / "src"), "PYTHONVERBOSE": "1"},
                       check=True, timeout=60)
    assert r.stdout.split() == [str(pyc), "42"]
    assert f"matches {mod}" in r.stderr, r.stderr[-2000:]   # read from the .pyc, not compiled
