"""Size profiles, custom mixes and RFC 6985 genomes as the spec validates them (no root)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cli_inproc
from tunbench.errors import SpecError
from tunbench.workloads import traffic
from tunbench.workloads.loss_search import LossSearch


def test_mix_parses_sizes_and_weights() -> None:
    assert traffic.parse_mix("64:7, 570:4,1518") == ((64, 7), (570, 4), (1518, 1))


@pytest.mark.parametrize("spec, words", [
    ("", "mix is empty"), ("64:7,,1518:1", "is not SIZE"), ("64:x", "is not SIZE"),
    ("30:1", "size 30 out of range"), ("64:0", "weight of size 64 is 0"),
    ("64:1,64:2", "lists a size twice"), ("64:1048577,65:1", "weights add up"),
])
def test_bad_mix_names_the_problem(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        traffic.parse_mix(spec)


def test_genome_uses_rfc6985_letters_in_order() -> None:
    assert traffic.parse_genome("aabG") == (64, 64, 128, 1518)
    with pytest.raises(ValueError, match="'z'.*interface MTU"):
        traffic.parse_genome("aaz")
    with pytest.raises(ValueError, match="'k' is not an RFC 6985 size letter"):
        traffic.parse_genome("aak")


def test_profiles_and_their_generator_arguments() -> None:
    assert traffic.profile("imix").args == ("--imix", "simple")
    v6 = traffic.profile("imix", 6)
    assert v6.args == ("--mix", "60:7,576:4,1500:1") and v6.mean_size == pytest.approx(4224 / 12)
    g = traffic.profile("genome", genome="aaaaaaaabbbbg")
    assert g.weights == ((64, 8), (128, 4), (1518, 1)) and g.args == ("--genome", "aaaaaaaabbbbg")
    assert traffic.profile("361").mean_size == 361
    with pytest.raises(ValueError, match="below the smallest IPv6 packet"):
        traffic.profile("mix", 6, mix="48:7,576:4,1438:1")


def test_loss_search_adds_mix_and_genome_to_its_sizes() -> None:
    p = LossSearch.parse_params({"sizes": ["361"], "mix": "48:7,576:4,1438:1",
                                 "genome": "abg"})
    assert p.profiles() == ("361", "mix", "genome")
    assert p.family_problems(6) and not p.family_problems(4)
    with pytest.raises(SpecError, match='sizes lists "genome" but genome is not set'):
        LossSearch.parse_params({"sizes": ["genome"]})


def test_flow_sets() -> None:
    classic = traffic.parse_flows(100)
    assert classic.classic and classic.count == 100 and classic.src_ports == 100
    study = traffic.parse_flows("5x5x100x100")
    assert not study.classic and study.count == 100
    assert traffic.parse_flows("2x3x4x6").count == 12
    assert study.src_port_base(5301) == 10000 and classic.src_port_base(5301) is None
    assert study.src_port_base(9950) == 10050   # above destination ports 9950..10049
    for bad, words in (("5x5", "neither a count"), ("0x1x1x1", "count of 0"),
                       ("1x5x1x1", "differ only in their destination address"),
                       ("100x1x1x1", "more than 65 addresses"), (70000, "out of range"),
                       ("1x1x256x257", "more than 65535")):
        with pytest.raises(ValueError, match=words):
            traffic.parse_flows(bad)


@pytest.mark.parametrize("argv, words", [
    (["--workloads", "loss-search", "--flows", "1x5x1x1"], "--flows: flows '1x5x1x1'"),
    (["--workloads", "loss-search", "--genome", "aaz"], "--genome: genome letter 'z'"),
    (["--workloads", "loss-search", "--mix", "64:0"], "--mix: mix weight of size 64 is 0"),
    (["--workloads", "stream", "--mix", "64:1"], "--mix applies to none of the workloads"),
])
def test_traffic_flags_refused_in_one_line(argv: list[str], words: str) -> None:
    r = cli_inproc.tunbench("run", "--tunnels", "native", *argv, "--dry-run")
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout


def test_experiment_family_6_refuses_small_packets_before_running(tmp_path: Path) -> None:
    exp = tmp_path / "v6.toml"
    exp.write_text('[experiment]\nfamily = 6\n[[tunnel]]\nkind = "native"\n'
                   '[[workload]]\nname = "loss-search"\nsizes = ["imix"]\n'
                   'mix = "48:7,576:4,1438:1"\n')
    r = cli_inproc.tunbench("run", "--experiment", str(exp), "--dry-run")
    assert r.returncode == 2, r.stderr
    assert "size 48 B (mix) is below the smallest IPv6 packet" in r.stderr
    assert "imix" not in r.stderr.split("(mix)")[0].lower()   # the IPv6 IMIX itself is fine


def test_traffic_flags_are_checked_together() -> None:
    """--sizes naming "mix" is fine once --mix gives it (the flags are one set)."""
    r = cli_inproc.tunbench("run", "--tunnels", "native", "--workloads", "loss-search", "--sizes",
                            "343,mix", "--mix", "64:7,570:4,1518:1", "--flows", "5x5x100x100",
                            "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "native-loss-search" in r.stdout
