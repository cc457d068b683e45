"""A bad mirror's cost is bounded: its bytes on disk by the pinned size, its time by the rate floor.

Each misbehaving mirror of tests/mirror.py is tried first, then the good one: the download must
end with the verified file, the bad try must stop inside the limits derived from the pin and the
policy (never a figure read off a run), and the reason must say what the mirror did.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import re
import time
import zlib

import pytest

import gradlanes.data.fetch as fetch
from gradlanes.atomic import atomic_path
from gradlanes.data.fetch import FailureKind, FetchedFile, FetchPolicy, FileSpec, MirrorFailure, fetch_file
from gradlanes.data.gzip_stream import (
    ContentMismatch,
    CorruptGzip,
    GzipContent,
    InflatesPastPin,
    NotGzip,
    TruncatedGzip,
)
from gradlanes.data.limits import GZIP_OVERHEAD_BYTES, KIB, RateFloor, archive_limit
from tests.mirror import TRICKLE_S

# A floor a loaded machine's loopback clears by orders of magnitude, and a timeout long enough to
# connect under load; the trickle (a byte every TRICKLE_S) is far below the floor.
POLICY = FetchPolicy(timeout_s=1.0, retries=1, backoff_s=0.0, min_rate_kib_s=256)
ROLE = "test_labels"


@pytest.fixture
def spec(dataset_config) -> FileSpec:
    entry = dataset_config["files"][ROLE]
    return FileSpec(ROLE, entry["name"], entry["sha256"], entry["bytes"])


@pytest.fixture
def written(monkeypatch) -> list[int]:
    """The size of each try's temporary file when the try ends: its peak, since a download only
    appends. Read before the file is removed or renamed."""
    sizes: list[int] = []

    @contextlib.contextmanager
    def measured(target):
        with atomic_path(target) as tmp:
            try:
                yield tmp
            finally:
                sizes.append(tmp.stat().st_size if tmp.exists() else 0)

    monkeypatch.setattr(fetch, "atomic_path", measured)
    return sizes


def worst_seconds(spec: FileSpec, policy: FetchPolicy) -> float:
    """The longest one try may take: the file's deadline at the floor rate for the largest archive
    its pin allows, plus one read that may block for the whole timeout once it has passed."""
    floor = RateFloor(policy.min_rate_kib_s, policy.timeout_s)
    return floor.deadline_s(archive_limit(spec.content_bytes)) + policy.timeout_s


BAD_MIRRORS = {
    "endless": (FailureKind.PERMANENT, "corrupt gzip: "),
    "padded": (FailureKind.PERMANENT, "sent more than the 1,059,835 bytes an archive of its pinned 10,008"),
    "huge": (FailureKind.PERMANENT, "announces 1,000,000,000,000 bytes, more than the 1,059,835"),
    "bomb": (FailureKind.PERMANENT, "the content inflates past its pinned 10,008 bytes"),
    "trickle": (FailureKind.UNREACHABLE, "too slow: "),
}


@pytest.mark.parametrize("mode", list(BAD_MIRRORS))
def test_a_bad_mirror_is_stopped_within_its_limits_and_the_good_one_serves(
    mode, mirror_server, spec, written, tmp_path
):
    kind, reason = BAD_MIRRORS[mode]
    bad = mirror_server.mirror(mode)
    started = time.monotonic()
    with pytest.raises(MirrorFailure) as caught:
        fetch._try_once(spec, fetch.mirror_url(bad, spec.name), tmp_path / "alone" / spec.name, POLICY)
    seconds = time.monotonic() - started
    assert caught.value.kind is kind and caught.value.reason.startswith(reason), caught.value.reason
    if kind is FailureKind.PERMANENT and mode != "huge":  # what was read before the stop is named
        assert re.search(r"\(stopped after [\d,]+ bytes\)$", caught.value.reason), caught.value.reason
    assert seconds <= worst_seconds(spec, POLICY), f"{mode} took {seconds:.1f} s"
    assert max(written) <= archive_limit(spec.content_bytes)
    if mode == "huge":
        assert written == [0], "a body announced past the bound must not be read"
    assert list((tmp_path / "alone").iterdir()) == []

    fetched = fetch_file(spec, [bad, mirror_server.mirror("good")], tmp_path / "then", POLICY)
    assert isinstance(fetched, FetchedFile) and fetched.mirror == mirror_server.mirror("good")
    assert fetched.content_sha256 == spec.sha256 and fetched.content_bytes == spec.content_bytes
    assert fetched.attempts[0].startswith(f"{bad}: attempt 1: {reason}")
    assert sorted(p.name for p in (tmp_path / "then").iterdir()) == [spec.name]
    if kind is FailureKind.UNREACHABLE:
        assert "marked dead" in fetched.attempts[0]


def test_a_trickle_is_stopped_soon_after_the_grace_period(mirror_server, spec, written, tmp_path):
    """The rate is checked at each byte, not at the file's deadline: a trickle costs the grace
    period and at most one read, whatever the file's size."""
    started = time.monotonic()
    failures = fetch_file(spec, [mirror_server.mirror("trickle")], tmp_path, POLICY, sleep=lambda s: None)
    seconds = time.monotonic() - started
    assert seconds <= POLICY.timeout_s + POLICY.timeout_s + TRICKLE_S
    reason = failures[0][1][0]
    assert "below download.min_rate_kib_s = 256 after the first 1 s" in reason
    assert max(written) < 2 * POLICY.timeout_s / TRICKLE_S  # a byte per TRICKLE_S, at most


def test_a_trickling_mirror_is_skipped_for_later_files(mirror_server, dataset_config, tmp_path):
    files = dataset_config["files"]
    specs = [
        FileSpec(r, files[r]["name"], files[r]["sha256"], files[r]["bytes"]) for r in ("train_labels", ROLE)
    ]
    asked_before = mirror_server.requests_for("trickle", specs[1].name)
    fetched = fetch.fetch_dataset(
        "mnist", specs, [mirror_server.mirror("trickle"), mirror_server.mirror("good")], tmp_path, POLICY
    )
    assert [item.mirror for item in fetched] == [mirror_server.mirror("good")] * 2
    assert "too slow" in fetched[0].attempts[0]
    assert (
        fetched[1].attempts[0].startswith(f"{mirror_server.mirror('trickle')}: skipped: was too slow earlier")
    )
    assert mirror_server.requests_for("trickle", specs[1].name) == asked_before


def test_an_archive_exactly_at_the_bound_is_accepted_and_one_byte_more_refused(tmp_path, written):
    """gzip allows zero bytes after its members, so a valid archive can have any length: at the
    bound it is read, verified and kept; one byte longer it is refused unread."""
    content = b"pinned content"
    spec = FileSpec(ROLE, "a.gz", hashlib.sha256(content).hexdigest(), len(content))
    member = gzip.compress(content, mtime=0)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.gz").write_bytes(member + bytes(archive_limit(len(content)) - len(member)))
    fetched = fetch_file(spec, [str(tmp_path / "m")], tmp_path / "at", POLICY)
    assert isinstance(fetched, FetchedFile), fetched
    assert fetched.archive_bytes == archive_limit(len(content)) and fetched.content_bytes == len(content)
    (tmp_path / "m" / "a.gz").write_bytes(member + bytes(archive_limit(len(content)) + 1 - len(member)))
    with pytest.raises(MirrorFailure) as caught:
        fetch._try_once(spec, str(tmp_path / "m" / "a.gz"), tmp_path / "past" / "a.gz", POLICY)
    assert caught.value.kind is FailureKind.PERMANENT
    assert caught.value.reason.startswith("announces 1,048,592 bytes, more than the 1,048,591")


def test_a_local_file_past_the_bound_is_refused_unread(tmp_path, written):
    content = b"pinned content"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.gz").write_bytes(b"\x1f\x8b" + bytes(archive_limit(len(content))))
    spec = FileSpec(ROLE, "a.gz", hashlib.sha256(content).hexdigest(), len(content))
    failures = fetch_file(spec, [str(tmp_path / "m")], tmp_path / "out", POLICY)
    assert failures[0][1][0].startswith("attempt 1: announces 1,048,593 bytes, more than the 1,048,591")
    assert written == [0]


# ---- the bounds themselves ---------------------------------------------------------------------
def test_the_archive_bound_covers_every_encoder_level_and_literal_only_deflate():
    """The bound is content * 9/8 plus gzip's overhead; real archives of incompressible content,
    at every level, a fixed-Huffman literal-only stream, and stored blocks all fit under it."""
    content = bytes(range(256)) * 4096 + hashlib.sha256(b"x").digest() * 997
    limit = archive_limit(len(content))
    assert limit == len(content) + len(content) // 8 + GZIP_OVERHEAD_BYTES
    for level in range(10):
        assert len(gzip.compress(content, compresslevel=level)) <= limit
    literal_only = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS, 9, zlib.Z_FIXED)
    assert len(literal_only.compress(content) + literal_only.flush()) <= limit


def test_the_rate_floor_owes_nothing_in_the_grace_period_then_the_rate():
    floor = RateFloor(min_rate_kib_s=64, grace_s=30)
    assert floor.owed(0) == floor.owed(30) == 0
    assert floor.owed(31) == 64 * KIB
    assert floor.too_slow(0, 30) is None and floor.too_slow(64 * KIB, 31) is None
    assert floor.too_slow(64 * KIB - 1, 31) == (
        "too slow: 65,535 bytes in 31.0 s (2.06 KiB/s), below download.min_rate_kib_s = 64 "
        "after the first 30 s"
    )
    assert floor.deadline_s(64 * KIB * 10) == 40


# ---- the streaming check -----------------------------------------------------------------------
def content_check(content: bytes, archive: bytes, step: int) -> tuple[str, int]:
    check = GzipContent(hashlib.sha256(content).hexdigest(), len(content))
    for start in range(0, len(archive), step):
        check.feed(archive[start : start + step])
    return check.finish()


@pytest.mark.parametrize("step", [1, 7, 1 << 20])
def test_members_and_zero_padding_read_as_gzip_reads_them(step):
    first, second = b"first member " * 50, b"second member" * 30
    archive = gzip.compress(first, mtime=0) + b"\x00" * 9 + gzip.compress(second, mtime=0) + b"\x00" * 3
    assert gzip.decompress(archive) == first + second
    assert content_check(first + second, archive, step) == (
        hashlib.sha256(first + second).hexdigest(),
        len(first + second),
    )


@pytest.mark.parametrize(
    ("archive", "problem", "reason"),
    [
        (b"", NotGzip, "body is not gzip (it is empty)"),
        (b"\x1f", NotGzip, "body is not gzip (it starts with '\\x1f')"),
        (b"<html>\n" + bytes(99), NotGzip, "body is not gzip (it starts with '<html>"),
        (b"PK\x03\x04zip", NotGzip, "body is not gzip (it starts with 'PK\\x03\\x04zip')"),
        (
            gzip.compress(b"content", mtime=0)[:-1],
            TruncatedGzip,
            "truncated gzip: the compressed stream ends early",
        ),
        (gzip.compress(b"content", mtime=0) + b"junk", CorruptGzip, "corrupt gzip: "),
        (gzip.compress(b"content", mtime=0) + b"\x00X", CorruptGzip, "corrupt gzip: "),
        (b"Xenial mirror: moved\n", NotGzip, "body is not gzip (it starts with 'Xenial mirror: moved')"),
        (gzip.compress(b"content", mtime=0)[:-8] + bytes(8), CorruptGzip, "corrupt gzip: "),
        (gzip.compress(b"contenT", mtime=0), ContentMismatch, "content SHA-256 mismatch: got "),
        (gzip.compress(b"conten", mtime=0), ContentMismatch, "content SHA-256 mismatch: got "),
        (
            gzip.compress(b"content!", mtime=0),
            InflatesPastPin,
            "the content inflates past its pinned 7 bytes",
        ),
    ],
    ids=[
        "empty",
        "one-byte",
        "html",
        "zip",
        "cut",
        "junk-after",
        "x-after",
        "x-text",
        "bad-crc",
        "other",
        "shorter",
        "longer",
    ],  # fmt: skip
)
def test_each_wrong_archive_is_named(archive, problem, reason):
    with pytest.raises(problem) as caught:
        content_check(b"content", archive, 3)
    assert caught.value.reason.startswith(reason), caught.value.reason


def test_a_long_body_that_is_not_gzip_is_refused_at_its_fortieth_byte():
    check = GzipContent("0" * 64, 7)
    body = b"Not Found: the file you asked for is not on this mirror\n"
    with pytest.raises(NotGzip) as caught:
        for start in range(0, len(body), 3):
            check.feed(body[start : start + 3])
    assert caught.value.reason == (
        "body is not gzip (it starts with 'Not Found: the file you asked for is not')"
    )
    assert start == 39  # the chunk that brought the fortieth byte


def test_bytes_after_a_member_are_named():
    with pytest.raises(CorruptGzip) as caught:
        content_check(b"content", gzip.compress(b"content", mtime=0) + b"junk after it", 1 << 20)
    assert caught.value.reason == (
        "corrupt gzip: what follows a member is neither another member nor zero padding "
        "(it starts with b'junk aft')"
    )


def test_a_cut_archive_says_how_much_content_it_held():
    with pytest.raises(TruncatedGzip) as caught:
        content_check(b"content", gzip.compress(b"content", mtime=0)[:-1], 1)
    assert (
        str(caught.value)
        == caught.value.reason
        == ("truncated gzip: the compressed stream ends early, after 7 bytes of content")
    )


def test_a_bomb_is_stopped_one_step_past_its_pin_without_holding_the_content():
    pinned = 1000
    check = GzipContent("0" * 64, pinned)
    bomb = gzip.compress(bytes(1 << 25), compresslevel=9, mtime=0)  # 32 MiB of zeros in 32 KB
    with pytest.raises(InflatesPastPin) as caught:
        check.feed(bomb)
    assert check.content_bytes <= 1 << 20  # one zlib output step, not the 32 MiB
    assert "(1,048,576 so far)" in caught.value.reason


def test_a_mirror_failure_is_what_a_wrong_archive_says():
    failure = fetch._content_failure(TruncatedGzip("cut"))
    assert (failure.kind, failure.reason) == (FailureKind.TRANSIENT, "cut")
    for problem in (NotGzip("a"), CorruptGzip("b"), ContentMismatch("c"), InflatesPastPin("d")):
        assert fetch._content_failure(problem).kind is FailureKind.PERMANENT
    assert isinstance(failure, MirrorFailure)
