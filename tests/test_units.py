"""Every unit spelling llmpar reads (llmpar.units), and the one rule b = bit, B = byte (issue 9, item 4).

Before the fix `--size 100Mb` and `--reserve 4Gb` were read as 100 MB and 4 GB while a bandwidth
`400 Gb/s` was read as bits: the same letter meant two things. Sizes are bytes; a size spelled
in bits is refused with the byte spelling to use.
"""

from __future__ import annotations

import pytest

from conftest import assert_one_line_error
from llmpar import units as U
from llmpar.errors import UserError
from llmpar.units import (
    parse_bandwidth, parse_bytes, parse_count, parse_flops, parse_per_direction_bandwidth, parse_seconds,
)


@pytest.mark.parametrize("text, value", [
    ("4096", 4096), ("4096B", 4096), ("4096 B", 4096), ("7 byte", 7), ("5 bytes", 5),
    ("1kB", 1e3), ("1KB", 1e3), ("2MB", 2e6), ("3GB", 3e9), ("4TB", 4e12), ("5PB", 5e15), ("6EB", 6e18),
    ("1KiB", 2**10), ("1kiB", 2**10), ("2MiB", 2 * 2**20), ("3GiB", 3 * 2**30), ("4TiB", 4 * 2**40),
    ("5PiB", 5 * 2**50), ("1EiB", 2**60),
    ("80 GiB", 80 * 2**30), ("1.5 GB", 1.5e9), ("1e3MB", 1e9), (".5KiB", 512),
    ("1G", 1e9), ("1Gi", 2**30),       # a bare prefix: bytes (the option says what it counts)
])
def test_size_spellings(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text, message", [
    # 100 megabits = 12.5 MB; the old reader took it as 100 MB (8x too much)
    ("100Mb", "100Mb is megabits; sizes are in bytes (b = bit, B = byte): write 100MB or 100MiB"),
    ("4Gb", "4Gb is gigabits; sizes are in bytes (b = bit, B = byte): write 4GB or 4GiB"),
    ("3kb", "3kb is kilobits; sizes are in bytes (b = bit, B = byte): write 3kB or 3KiB"),
    ("2 Tb", "2 Tb is terabits"),
    ("1Gib", "1Gib is gibibits; sizes are in bytes (b = bit, B = byte): write 1GiB"),
    ("1 Gibit", "1 Gibit is gibibits"),
    ("8 bits", "8 bits is bits; sizes are in bytes (b = bit, B = byte): write 8B or 8"),
    ("100b", "100b is bits"),
])
def test_sizes_in_bits_are_refused(text, message):
    with pytest.raises(UserError) as err:
        parse_bytes(text)
    assert message in str(err.value)


@pytest.mark.parametrize("bad", ["0", "-5", "abc", "1.5XB", "", "1 GiBB", "inf", "nan", "1e400"])
def test_bad_sizes(bad):
    with pytest.raises(UserError):
        parse_bytes(bad)


@pytest.mark.parametrize("text, value, bidir", [
    # bits: 400 Gb/s / 8 = 50e9 B/s (one NDR NIC); bytes as written
    ("400 Gb/s", 50e9, False), ("400Gbit/s", 50e9, False), ("400 Gbits/s", 50e9, False),
    ("400 Gb/sec", 50e9, False), ("100 Mb/s", 12.5e6, False), ("8 kb/s", 1e3, False), ("8 b/s", 1.0, False),
    ("450 GB/s", 450e9, False), ("3.35 TB/s", 3.35e12, False), ("1 kB/s", 1e3, False),
    ("900 GB/s bidirectional", 900e9, True), ("900 GB/s bidir", 900e9, True),
    ("900 GB/s bi-directional", 900e9, True), ("450 GB/s per direction", 450e9, False),
    ("450 GB/s unidirectional", 450e9, False), (25e9, 25e9, False),
])
def test_bandwidth_spellings(text, value, bidir):
    assert parse_bandwidth(text) == (value, bidir)


def test_per_direction_halves_bidirectional():
    # NVLink 4: 900 GB/s bidirectional = 450 GB/s each way
    assert parse_per_direction_bandwidth("900 GB/s bidirectional") == 450e9
    assert parse_per_direction_bandwidth("400 Gb/s") == 50e9


@pytest.mark.parametrize("bad", ["400 Gb", "fast", "0 GB/s", "-1 GB/s", "400 GiB"])   # 400 GiB/s is read (binary prefix)
def test_bad_bandwidths(bad):
    with pytest.raises(UserError):
        parse_bandwidth(bad)


@pytest.mark.parametrize("text, value", [
    ("989 TFLOPS", 989e12), ("989TFLOP/s", 989e12), ("67 TFLOPS", 67e12), ("67 flops", 67.0),
    ("1.979 PFLOPS", 1.979e15), ("5e14", 5e14), ("312 TFLOP/s", 312e12), ("1 kflop/s", 1e3),
])
def test_flops_spellings(text, value):
    assert parse_flops(text) == pytest.approx(value)


@pytest.mark.parametrize("text, value", [
    ("2 us", 2e-6), ("2us", 2e-6), ("2 µs", 2e-6), ("3 ns", 3e-9), ("5 ms", 5e-3), ("0.1 s", 0.1), ("0.1", 0.1),
    ("0", 0.0),
])
def test_time_spellings(text, value):
    assert parse_seconds(text) == pytest.approx(value)


@pytest.mark.parametrize("text, value", [
    ("7.5B", 7.5e9), ("70B", 70e9), ("1.2T", 1.2e12), ("350M", 350e6), ("12e9", 12e9), ("4k", 4e3), ("4K", 4e3),
    ("1G", 1e9), ("100", 100),
    # lower-case suffixes, as model names and budgets are written (newcomer review: --tokens 15t refused)
    ("15t", 15e12), ("70b", 70e9), ("350m", 350e6), ("1g", 1e9),
])
def test_count_spellings(text, value):
    # counts (parameters, tokens): B is a billion, there are no bytes in a count
    assert parse_count(text) == pytest.approx(value)


@pytest.mark.parametrize("args, needle", [
    (("collective", "all-reduce", "--size", "100Mb", "--gpus", "8"), "write 100MB or 100MiB"),
    (("memory", "llama-3-8b", "--reserve", "4Gb"), "write 4GB or 4GiB"),
])
def test_cli_refuses_bit_sizes(cli, args, needle):
    assert_one_line_error(cli(*args), needle)


@pytest.mark.parametrize("parse, text", [
    (U.parse_bytes, "1e-400 GB"), (U.parse_seconds, "1e-400 s"), (U.parse_bandwidth, "1e-400 GB/s"),
    (U.parse_flops, "1e-400 TFLOP/s"), (U.parse_count, "1e-400"), (U.parse_power, "1e-400 W"),
])
def test_a_number_below_the_smallest_float_is_refused_not_read_as_zero(parse, text):
    # 1e-400 underflows to 0.0, and zero often means "none" (--reserve 0, --optimizer-offload 0):
    # every unit parser refuses it (the class; --optimizer-offload 1e-400 was the instance found)
    with pytest.raises(UserError, match="rounds to 0"):
        parse(text)
    assert U.parse_seconds("0 s") == 0.0          # a written zero is still zero
