"""The one place input is read (tunbench.inputs) and the value checks behind it: list flags,
file bytes, parameter coercion, congestion control names, problems reported once."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tunbench import capabilities, cli, inputs, spec
from tunbench.errors import SpecError
from tunbench.workloads import stream


@pytest.mark.parametrize("text, expect", [
    ("native,vxlan", ["native", "vxlan"]),
    (" native , vxlan ", ["native", "vxlan"]),
    ("native", ["native"]),
])
def test_split_list(text: str, expect: list[str]) -> None:
    assert inputs.split_list("--tunnels", text) == expect


@pytest.mark.parametrize("text, needle", [
    (",", "empty element"), ("native,,vxlan", "empty element"), ("native,", "empty element"),
    (",native", "empty element"), ("", "needs a value"), ("  ", "needs a value"),
    ("native,native", "names native twice"),
])
def test_split_list_refuses(text: str, needle: str) -> None:
    with pytest.raises(SpecError) as e:
        inputs.split_list("--tunnels", text)
    assert e.value.message.startswith("--tunnels") and needle in e.value.message
    assert "\n" not in e.value.one_line()


def test_split_list_duplicates_allowed_where_asked() -> None:
    assert inputs.split_list("--x", "a,a", unique=False) == ["a", "a"]


@pytest.mark.parametrize("raw, needle", [
    (b"\xef\xbb\xbf[experiment]\nrepeats = 2\n", None),        # UTF-8 BOM: fine
    ("[experiment]\n".encode("utf-16-le"), "NUL byte"),         # UTF-16 without a BOM
    ("[experiment]\n".encode("utf-16"), "is UTF-16 text"),
    ("[experiment]\n".encode("utf-32"), "is UTF-32 text"),
    (b"repeats = 2\n\xc3\x28", "not UTF-8 text (byte 12: b'\\xc3')"),
])
def test_decode(raw: bytes, needle: str | None) -> None:
    if needle is None:
        assert inputs.parse_toml(inputs.decode_utf8(raw, "f"), "f") == {
            "experiment": {"repeats": 2}}
        return
    with pytest.raises(SpecError, match=None) as e:
        inputs.decode_utf8(raw, "experiment file f.toml")
    assert needle in e.value.message and "f.toml" in e.value.message


def test_toml_error_is_its_first_line(tmp_path: Path) -> None:
    f = tmp_path / "x.toml"
    f.write_text("[experiment]\nrepeats = = 3\n")
    with pytest.raises(SpecError) as e:
        spec.load_toml(f)
    assert e.value.message.startswith(f"{f}: not valid TOML: ")
    assert "line 2" in e.value.message and "\n" not in e.value.message


@pytest.mark.parametrize("value, ok", [
    (3, True), ("3", True), ("0x10", True), (4.0, True),
    (1.5, False), (math.inf, False), (math.nan, False), (True, False), ([1], False),
])
def test_int_parameters_are_never_truncated(value: object, ok: bool) -> None:
    """`streams = 1.5` was silently 1 and `streams = inf` an OverflowError traceback."""
    if ok:
        assert stream.WORKLOAD.parse_params({"streams": value}).streams in (3, 16, 4)
    else:
        with pytest.raises(SpecError, match="parameter 'streams' must be int"):
            stream.WORKLOAD.parse_params({"streams": value})


def test_literal_parameters_match_type() -> None:
    """cookie is Literal[0, 4, 8]: False equals 0 in Python but is not a cookie length."""
    from tunbench.tunnels import l2tp
    with pytest.raises(SpecError, match="cookie"):
        l2tp.DRIVER.parse_params({"cookie": False})
    assert l2tp.DRIVER.parse_params({"cookie": 4}).cookie == 4


def test_congestion_names() -> None:
    assert capabilities.congestion_problems("") == []
    assert capabilities.congestion_problems("cubic") == []
    assert capabilities.congestion_problems("Cubic!")
    with pytest.raises(SpecError, match="congestion 'x y'"):
        stream.WORKLOAD.parse_params({"congestion": "x y"})
    offered = capabilities.AVAILABLE_CC.read_text().split()
    assert capabilities.congestion_missing(offered[0]) is None
    missing = capabilities.congestion_missing("nosuchcc")
    assert missing is not None and "nosuchcc" in missing.one_line()
    p = stream.WORKLOAD.parse_params({"congestion": "nosuchcc"})
    assert any("nosuchcc" in m.one_line() for m in stream.WORKLOAD.requirements(p))


def test_swept_workload_problem_reported_once() -> None:
    """parallel-streams sweeps 10 stream counts: a bad `length` was listed 10 times."""
    with pytest.raises(SpecError) as e:
        spec.build({"workload": [{"name": "parallel-streams", "length": -1}]}, "x.toml")
    assert e.value.message.count("length") == 1


def test_flag_values_are_named_as_flags() -> None:
    """A bad value that came from a flag is named as the flag, even with an experiment file
    as the source."""
    with pytest.raises(SpecError) as e:
        spec.build({"experiment": {"duration": math.nan, "loss": "x"}}, "exp.toml",
                   flags={"duration", "loss"})
    assert e.value.message.splitlines() == [
        "--duration must be a number from 1 to 86400, got nan",
        "--loss 'x' is not a percentage from 0% to 100% like 0.1%"]


@pytest.mark.parametrize("exp, needle", [
    ({"duration": math.inf}, "experiment.duration"),
    ({"warmup": 5, "duration": 5}, "must be shorter than the duration"),
    ({"rate": "0mbit"}, "experiment.rate '0mbit'"),
    ({"netem_rate": "0kbit"}, "experiment.netem_rate '0kbit'"),
    ({"mtus": [1500, 1500]}, "1500 is listed twice"),
    ({"name": "a\nb"}, "experiment.name must be 1-80 printable"),
    ({"name": ""}, "experiment.name must be 1-80 printable"),
])
def test_experiment_ranges(exp: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as e:
        spec.build({"experiment": exp}, "x.toml")
    assert needle in e.value.message


def test_out_that_cannot_be_a_folder(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(SpecError, match="exists and is not a folder"):
        cli.check_out(f)
    with pytest.raises(SpecError, match="is not a writable folder"):
        cli.check_out(f / "sub")
    cli.check_out(tmp_path / "new" / "folder")


@pytest.mark.parametrize("label", [True, 1.5, 7, ["a"]])
def test_tunnel_label_must_be_text(label: object) -> None:
    """`label = true` used to become the label 'True'."""
    with pytest.raises(SpecError, match="label .* must be 1-40 letters"):
        spec.build({"tunnel": [{"kind": "native", "label": label}]}, "x.toml")
