"""gradlanes.data.fetch against a real local HTTP mirror: every failure mode hands over cleanly."""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import http.client
import logging
import socket
import threading
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gradlanes.data.fetch import (
    CHUNK_BYTES,
    USER_AGENT,
    DownloadError,
    FailureKind,
    FetchPolicy,
    FileSpec,
    MirrorFailure,
    _describe_os_error,
    _try_once,
    failure_message,
    fetch_dataset,
    fetch_file,
    mirror_url,
)

FAST = FetchPolicy(timeout_s=1.0, retries=2, backoff_s=0.0)
# Short enough to keep each dead-mirror test near a second, long enough that a loaded CI machine
# still finishes a local request well inside it.
SILENT = FetchPolicy(timeout_s=0.5, retries=3, backoff_s=0.25)
ALL_ROLES = ("train_images", "train_labels", "test_images", "test_labels")
SKIPPED_TIMEOUT = "skipped: timed out earlier in this download"
SKIPPED_REFUSED = "skipped: refused the connection earlier in this download"


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts connections and never answers: a dead mirror.

    It counts accepted connections, which says how often the download went back to it without
    depending on how fast the machine is.
    """

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)  # lets the accept loop notice `stop`
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.mirror = f"http://127.0.0.1:{self.listener.getsockname()[1]}/mnist/"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.held.append(connection)  # held open, never read or written: the client must time out

    @property
    def connections(self) -> int:
        return len(self.held)

    def __enter__(self) -> SilentServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        for connection in self.held:
            connection.close()
        self.listener.close()


@contextlib.contextmanager
def refusing_mirror() -> Iterator[str]:
    """A mirror URL whose port is bound but not listening, so connect() is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # kept bound so no other process can take the port meanwhile
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mnist/"


def specs(dataset_config, roles=("train_labels", "test_labels")):
    files = dataset_config["files"]
    return [FileSpec(role, f["name"], f["sha256"], f["bytes"]) for role, f in ((r, files[r]) for r in roles)]


def assert_nothing_partial(folder: Path):
    leftovers = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    assert leftovers == [], f"left behind: {leftovers}"


def test_mirror_url_forms(tmp_path):
    assert mirror_url("https://h/mnist", "a.gz") == "https://h/mnist/a.gz"
    assert mirror_url("https://h/mnist//", "a b.gz") == "https://h/mnist/a%20b.gz"
    assert mirror_url("https://h/MNIST-BOX", "a.gz") == "https://h/MNIST-BOX/a.gz"
    assert mirror_url("https://h/MNIST-BOX/", "a.gz") == "https://h/MNIST-BOX/a.gz"
    assert mirror_url("https://h/mnist/", "a.gz") == "https://h/mnist/a.gz"
    assert mirror_url("file:///data/mnist/", "a.gz") == "file:///data/mnist/a.gz"
    assert mirror_url(str(tmp_path), "a.gz") == str(tmp_path / "a.gz")


def test_good_mirror_verifies_content(mirror_server, dataset_config, tmp_path):
    fetched = fetch_dataset("mnist", specs(dataset_config), [mirror_server.mirror("good")], tmp_path, FAST)
    for item, spec in zip(fetched, specs(dataset_config), strict=True):
        assert item.content_sha256 == spec.sha256
        data = Path(item.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == item.archive_sha256
        assert item.archive_bytes == len(data)
        assert item.content_bytes == len(gzip.decompress(data))
        assert item.mirror == mirror_server.mirror("good")
        assert item.url == mirror_server.mirror("good") + spec.name and item.attempts == []
        assert (item.role, item.name, item.path) == (spec.role, spec.name, str(tmp_path / spec.name))
        assert item.as_dict()["content_sha256"] == spec.sha256
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(s.name for s in specs(dataset_config))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("missing", "HTTP 404"),
        # the first 40 bytes, newlines shown as spaces
        ("html", "body is not gzip (it starts with '<!DOCTYPE html> <html><body>Rate limited')"),
        ("truncated", "truncated gzip"),
        ("flipped", "content SHA-256 mismatch"),
        ("hang", "no answer within the 1 s timeout"),
    ],
)
def test_bad_mirror_fails_with_reason_and_leaves_nothing(
    mirror_server, dataset_config, tmp_path, mode, expected
):
    target = tmp_path / "mnist"
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", specs(dataset_config), [mirror_server.mirror(mode)], target, FAST)
    message = str(caught.value)
    assert message.startswith("Could not download dataset 'mnist': no mirror served a verified copy of ")
    assert expected in message
    assert mirror_server.mirror(mode) in message
    assert "curl -fLO" in message and "dataset.mirrors" in message
    assert "make run MIRROR=" in message
    assert_nothing_partial(target)


def test_one_message_lists_every_mirror(mirror_server, dataset_config, tmp_path):
    mirrors = [
        mirror_server.mirror("missing"),
        mirror_server.mirror("html"),
        "http://127.0.0.1:9/nothing-listens/",
    ]
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", specs(dataset_config), mirrors, tmp_path / "d", FAST)
    message = str(caught.value)
    for index, mirror in enumerate(mirrors, start=1):
        assert f"mirror {index} {mirror}" in message
    assert "connection failed" in message
    for spec in specs(dataset_config):
        assert f"# must print {spec.sha256}" in message


def test_first_mirror_bad_second_good(mirror_server, dataset_config, tmp_path):
    mirrors = [mirror_server.mirror("flipped"), mirror_server.mirror("good")]
    fetched = fetch_dataset("mnist", specs(dataset_config), mirrors, tmp_path, FAST)
    assert {item.mirror for item in fetched} == {mirror_server.mirror("good")}
    assert all("content SHA-256 mismatch" in item.attempts[0] for item in fetched)


def test_transient_error_is_retried_on_the_same_mirror(mirror_server, dataset_config, tmp_path):
    waits = []
    fetched = fetch_dataset(
        "mnist",
        specs(dataset_config, ("test_labels",)),
        [mirror_server.mirror("flaky")],
        tmp_path,
        FetchPolicy(timeout_s=2, retries=3, backoff_s=0.25),
        sleep=waits.append,
    )
    assert fetched[0].mirror == mirror_server.mirror("flaky")
    assert waits == [0.25]


def test_local_folder_and_file_url_mirrors(shared_mnist, dataset_config, tmp_path):
    for mirror in (str(shared_mnist), shared_mnist.as_uri()):
        dest = tmp_path / mirror.replace("/", "_")
        fetched = fetch_dataset("mnist", specs(dataset_config), [mirror], dest, FAST)
        assert [item.mirror for item in fetched] == [mirror, mirror]


def test_no_mirrors_is_a_config_error(dataset_config, tmp_path):
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", specs(dataset_config), [], tmp_path)
    assert str(caught.value) == (
        "dataset 'mnist' has no mirrors: add at least one URL or folder under dataset.mirrors in config.yaml"
    )


def test_stale_partial_file_is_never_trusted(mirror_server, dataset_config, tmp_path):
    spec = specs(dataset_config, ("test_labels",))[0]
    stale = tmp_path / f".{spec.name}.abc{'.part'}"
    stale.write_bytes(b"half a download")
    fetch_dataset("mnist", [spec], [mirror_server.mirror("good")], tmp_path, FAST)
    assert not stale.exists()


def test_silent_mirror_is_contacted_once_per_download(mirror_server, dataset_config, tmp_path, caplog):
    waits: list[float] = []
    good = mirror_server.mirror("good")
    with SilentServer() as silent, caplog.at_level(logging.INFO, logger="gradlanes.data.fetch"):
        fetched = fetch_dataset(
            "mnist", specs(dataset_config, ALL_ROLES), [silent.mirror, good], tmp_path, SILENT, waits.append
        )
        connections = silent.connections
    assert [item.mirror for item in fetched] == [good] * 4
    assert connections == 1, "the dead mirror must not be tried again for the later files"
    assert waits == [], "a silent mirror with another mirror behind it is not retried"
    first, *later = (item.attempts for item in fetched)
    assert first == [
        f"{silent.mirror}: attempt 1: no answer within the 0.5 s timeout; "
        "marked dead: skipped for the remaining files of this download"
    ]
    first_name = specs(dataset_config, ALL_ROLES)[0].name
    note = f"{SKIPPED_TIMEOUT} ({first_name}: no answer within the 0.5 s timeout)"
    for attempts in later:
        assert attempts == [f"{silent.mirror}: {note}"]
    messages = [record.getMessage() for record in caplog.records]
    later_names = [spec.name for spec in specs(dataset_config, ALL_ROLES)[1:]]
    assert [m for m in messages if SKIPPED_TIMEOUT in m] == [
        f"{name}: {silent.mirror} {note}" for name in later_names
    ]
    assert f"{silent.mirror} timed out; skipping it for the remaining files of this download" in messages
    for item in fetched:
        assert f"{item.name} verified from {good} ({item.archive_bytes} bytes)" in messages


def test_refused_mirror_is_skipped_for_later_files(mirror_server, dataset_config, tmp_path, caplog):
    waits: list[float] = []
    good = mirror_server.mirror("good")
    with refusing_mirror() as refused, caplog.at_level(logging.WARNING, logger="gradlanes.data.fetch"):
        fetched = fetch_dataset(
            "mnist", specs(dataset_config, ALL_ROLES), [refused, good], tmp_path, SILENT, waits.append
        )
    assert [item.mirror for item in fetched] == [good] * 4
    tries = [
        r for r in caplog.records if r.getMessage().startswith(f"train-images-idx3-ubyte.gz from {refused}")
    ]
    assert len(tries) == 1 and "Connection refused" in tries[0].getMessage()
    assert sum(f"from {refused}" in record.getMessage() for record in caplog.records) == 1
    assert waits == []
    for item in fetched[1:]:
        assert item.attempts[0].startswith(f"{refused}: {SKIPPED_REFUSED}")


def test_only_mirror_silent_is_retried_with_backoff_then_skipped(dataset_config, tmp_path):
    waits: list[float] = []
    with SilentServer() as silent:
        with pytest.raises(DownloadError) as caught:
            fetch_dataset("mnist", specs(dataset_config), [silent.mirror], tmp_path, SILENT, waits.append)
        connections = silent.connections
    assert connections == SILENT.retries, "the only mirror keeps its retries on the first file"
    assert waits == [SILENT.backoff_s * 2**k for k in range(SILENT.retries - 1)]
    message = str(caught.value)
    assert f"attempt {SILENT.retries}: no answer within the 0.5 s timeout" in message
    assert SKIPPED_TIMEOUT in message, "the second file fails at once: the download has failed anyway"
    assert "curl -fLO" in message
    assert_nothing_partial(tmp_path)


def test_silent_last_live_mirror_keeps_its_retries(mirror_server, dataset_config, tmp_path):
    waits: list[float] = []
    with SilentServer() as silent:
        mirrors = [mirror_server.mirror("missing"), silent.mirror]
        with pytest.raises(DownloadError) as caught:
            fetch_dataset("mnist", specs(dataset_config), mirrors, tmp_path, SILENT, waits.append)
        connections = silent.connections
    assert connections == SILENT.retries, "no mirror follows it, so the first file gives it every try"
    assert len(waits) == SILENT.retries - 1
    message = str(caught.value)
    assert message.count("attempt 1: HTTP 404") == 2, "a mirror that answers 404 stays live for later files"
    assert SKIPPED_TIMEOUT in message


def test_dead_mirrors_are_not_shared_between_downloads(mirror_server, dataset_config, tmp_path):
    with SilentServer() as silent:
        for run in ("first", "second"):
            mirrors = [silent.mirror, mirror_server.mirror("good")]
            fetch_dataset("mnist", specs(dataset_config), mirrors, tmp_path / run, SILENT, lambda _: None)
        connections = silent.connections
    assert connections == 2, "each download gives the mirror one chance of its own"


def test_server_error_before_a_good_mirror_is_retried_not_marked_dead(
    mirror_server, dataset_config, tmp_path
):
    waits: list[float] = []
    flaky = mirror_server.mirror("flaky")
    mirrors = [flaky, mirror_server.mirror("good")]
    # train_labels: the flaky mirror fails each file once per session, and no other test asks it for this one
    fetched = fetch_dataset(
        "mnist", specs(dataset_config, ("train_labels",)), mirrors, tmp_path, SILENT, waits.append
    )
    assert fetched[0].mirror == flaky
    assert waits == [SILENT.backoff_s]


@pytest.mark.parametrize(
    ("error", "kind", "symptom"),
    [
        (urllib.error.URLError(TimeoutError("timed out")), FailureKind.UNREACHABLE, "timed out"),
        (TimeoutError("timed out"), FailureKind.UNREACHABLE, "timed out"),
        (
            urllib.error.URLError(ConnectionRefusedError(errno.ECONNREFUSED, "refused")),
            FailureKind.UNREACHABLE,
            "refused the connection",
        ),
        (
            urllib.error.URLError(socket.gaierror(socket.EAI_NONAME, "Name or service not known")),
            FailureKind.UNREACHABLE,
            "did not resolve",
        ),
        (
            urllib.error.URLError(OSError(errno.EHOSTUNREACH, "No route to host")),
            FailureKind.UNREACHABLE,
            "was unreachable",
        ),
        (ConnectionResetError(errno.ECONNRESET, "reset"), FailureKind.TRANSIENT, ""),
        (urllib.error.HTTPError("u", 503, "Service Unavailable", None, None), FailureKind.TRANSIENT, ""),
        (urllib.error.HTTPError("u", 404, "Not Found", None, None), FailureKind.PERMANENT, ""),
        (
            urllib.error.URLError(FileNotFoundError(errno.ENOENT, "missing", "/x.gz")),
            FailureKind.PERMANENT,
            "",
        ),
    ],
)
def test_failure_kinds(error, kind, symptom):
    failure = _describe_os_error(error, 30)
    assert (failure.kind, failure.symptom) == (kind, symptom)


# A permanent failure is the same answer on every try: tried once, then the next mirror at once.
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("missing", "HTTP 404"),
        ("html", "body is not gzip"),
        ("flipped", "content SHA-256 mismatch"),
        ("corrupt", "corrupt gzip"),
    ],
)
def test_a_permanent_failure_is_not_retried(mirror_server, dataset_config, tmp_path, mode, reason):
    waits: list[float] = []
    spec = specs(dataset_config, ("test_labels",))[0]
    before = mirror_server.requests_for(mode, spec.name)
    mirrors = [mirror_server.mirror(mode), mirror_server.mirror("good")]
    policy = FetchPolicy(timeout_s=2, retries=4, backoff_s=0.25)
    fetched = fetch_dataset("mnist", [spec], mirrors, tmp_path, policy, waits.append)
    assert mirror_server.requests_for(mode, spec.name) - before == 1
    assert waits == []
    assert fetched[0].mirror == mirror_server.mirror("good")
    assert len(fetched[0].attempts) == 1 and reason in fetched[0].attempts[0]
    assert "attempt 2" not in fetched[0].attempts[0]


# A transient failure may pass on the next try: every try is made, each wait twice the last.
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("short", "body ended after 2258 of 4517 announced bytes"),
        ("cut", "connection closed after 2268 bytes of the body"),  # http.client.IncompleteRead
        ("truncated", "truncated gzip"),
    ],
)
def test_a_transient_failure_is_retried_with_doubling_backoff(
    mirror_server, dataset_config, tmp_path, mode, reason
):
    waits: list[float] = []
    spec = specs(dataset_config, ("test_labels",))[0]
    before = mirror_server.requests_for(mode, spec.name)
    policy = FetchPolicy(timeout_s=2, retries=4, backoff_s=0.25)
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", [spec], [mirror_server.mirror(mode)], tmp_path, policy, waits.append)
    assert mirror_server.requests_for(mode, spec.name) - before == 4
    assert waits == [0.25, 0.5, 1.0]
    message = str(caught.value)
    for attempt in range(1, 5):
        assert f"attempt {attempt}: {reason}" in message
    assert "attempt 5" not in message
    assert_nothing_partial(tmp_path)


def test_a_failed_file_takes_the_verified_ones_with_it(shared_mnist, dataset_config, tmp_path):
    """The next rule needs the whole set: one missing file leaves no file of the download behind."""
    only_test_labels = tmp_path / "mirror"
    only_test_labels.mkdir()
    wanted = specs(dataset_config, ("test_labels", "train_labels"))
    (only_test_labels / wanted[0].name).write_bytes((shared_mnist / wanted[0].name).read_bytes())
    target = tmp_path / "mnist"
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", wanted, [str(only_test_labels)], target, FAST)
    assert f"no such file: {only_test_labels / wanted[1].name}" in str(caught.value)
    assert f"verified copy of {wanted[1].name}." in str(caught.value)
    assert list(target.iterdir()) == []


def test_an_incomplete_read_counts_the_bytes_read_before_it():
    failure = _describe_os_error(http.client.IncompleteRead(b"12345", 7), 30, received=1 << 20)
    assert failure.kind is FailureKind.TRANSIENT
    assert failure.reason == f"connection closed after {(1 << 20) + 5} bytes of the body"


def test_every_request_names_gradlanes_as_its_user_agent(mirror_server, dataset_config, tmp_path):
    before = len(mirror_server.user_agents)
    fetch_dataset(
        "mnist", specs(dataset_config, ("test_labels",)), [mirror_server.mirror("good")], tmp_path, FAST
    )
    assert mirror_server.user_agents[before:] == [USER_AGENT]


def test_a_body_that_stops_mid_way_times_out_naming_the_timeout(mirror_server, dataset_config, tmp_path):
    policy = FetchPolicy(timeout_s=0.5, retries=1, backoff_s=0.0)
    with pytest.raises(DownloadError) as caught:
        fetch_dataset(
            "mnist",
            specs(dataset_config, ("test_labels",)),
            [mirror_server.mirror("stall")],
            tmp_path,
            policy,
        )
    assert "attempt 1: no answer within the 0.5 s timeout" in str(caught.value)
    assert_nothing_partial(tmp_path)


def test_an_incomplete_read_after_whole_chunks_counts_every_byte_before_it(
    mirror_server, dataset_config, tmp_path
):
    """The 9.9 MB training images: the first 4.9 MB chunk arrives over many reads, then 10 bytes of
    the second before the close; every one of them counts."""
    spec = specs(dataset_config, ("train_images",))[0]
    half = (mirror_server.root / spec.name).stat().st_size // 2
    policy = FetchPolicy(timeout_s=5, retries=1, backoff_s=0.0)
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", [spec], [mirror_server.mirror("cut")], tmp_path, policy)
    assert f"attempt 1: connection closed after {half + 10} bytes of the body" in str(caught.value)


def test_the_default_count_before_an_incomplete_read_is_zero():
    assert _describe_os_error(http.client.IncompleteRead(b"abc"), 30).reason == (
        "connection closed after 3 bytes of the body"
    )


def test_a_connection_failure_says_what_failed():
    failure = _describe_os_error(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), 30)
    assert failure.reason == "connection failed: [Errno 104] Connection reset by peer"
    assert str(MirrorFailure("the reason", FailureKind.PERMANENT)) == "the reason"


@pytest.mark.parametrize(
    ("body", "kind", "reason"),
    [
        (b"<html>\n<body>\n", FailureKind.PERMANENT, "body is not gzip (it starts with '<html> <body>')"),
        (b"\x1f\x8b\x08\x00" + bytes(range(256)), FailureKind.PERMANENT, "corrupt gzip: "),
        (gzip.compress(b"other content", mtime=0), FailureKind.PERMANENT, "content SHA-256 mismatch: got "),
        (gzip.compress(b"other content", mtime=0)[:-6], FailureKind.TRANSIENT, "truncated gzip: "),
        (gzip.compress(bytes(14), mtime=0), FailureKind.PERMANENT, "the content inflates past its pinned 13"),
    ],
    ids=["html", "corrupt", "mismatch", "truncated", "longer"],  # ids, not bytes: stable from run to run
)
def test_what_a_wrong_body_is(tmp_path, body, kind, reason):
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "body.gz").write_bytes(body)
    spec = FileSpec("test_labels", "body.gz", "0" * 64, len(b"other content"))
    with pytest.raises(MirrorFailure) as caught:
        _try_once(spec, str(tmp_path / "mirror" / "body.gz"), tmp_path / "out" / "body.gz", FAST)
    assert caught.value.kind is kind and caught.value.reason.startswith(reason), caught.value.reason
    assert_nothing_partial(tmp_path / "out")


def test_content_is_hashed_and_counted_over_many_chunks(tmp_path):
    content = np.random.default_rng(0).integers(0, 256, 3 * (1 << 20) + 17, dtype=np.uint8).tobytes()
    archive = gzip.compress(content, compresslevel=1)
    (tmp_path / "big.gz").write_bytes(archive)
    digest = hashlib.sha256(content).hexdigest()
    spec = FileSpec("train_images", "big.gz", digest, len(content))
    verified = _try_once(spec, str(tmp_path / "big.gz"), tmp_path / "out" / "big.gz", FAST)
    assert (verified.content_sha256, verified.content_bytes) == (digest, len(content))
    assert verified.archive_bytes == len(archive) > CHUNK_BYTES
    assert verified.archive_sha256 == hashlib.sha256(archive).hexdigest()
    assert (tmp_path / "out" / "big.gz").read_bytes() == archive


def test_the_failure_message_in_full():
    specs_ = [FileSpec("train_labels", "b.gz", "1" * 64, 1), FileSpec("test_labels", "a.gz", "2" * 64, 1)]
    failed = {
        "b.gz": [("/data/mnist", ["attempt 1: no such file: /data/mnist/b.gz"])],
        "a.gz": [
            ("/data/mnist", ["attempt 1: no such file: /data/mnist/a.gz"]),
            ("http://m.example/mnist/", ["attempt 1: HTTP 404 Not Found", "attempt 2: HTTP 404 Not Found"]),
        ],
    }
    mirrors = ["/data/mnist", "http://m.example/mnist/", "https://s.example/mnist/"]
    assert failure_message("mnist", failed, specs_, mirrors) == "\n".join(
        [
            "Could not download dataset 'mnist': no mirror served a verified copy of a.gz, b.gz.",
            "",
            "b.gz:",
            "  mirror 1 /data/mnist",
            "      attempt 1: no such file: /data/mnist/b.gz",
            "a.gz:",
            "  mirror 1 /data/mnist",
            "      attempt 1: no such file: /data/mnist/a.gz",
            "  mirror 2 http://m.example/mnist/",
            "      attempt 1: HTTP 404 Not Found",
            "      attempt 2: HTTP 404 Not Found",
            "",
            "To fetch the files by hand (from any mirror you can reach) and check them:",
            "  mkdir -p ~/datasets/mnist && cd ~/datasets/mnist",
            "  curl -fLO http://m.example/mnist/b.gz",
            "  curl -fLO http://m.example/mnist/a.gz",
            f"  gunzip -c b.gz | sha256sum   # must print {'1' * 64}",
            f"  gunzip -c a.gz | sha256sum   # must print {'2' * 64}",
            "",
            "Then point the config key dataset.mirrors at that folder, for example:",
            "  make run MIRROR=~/datasets/mnist",
            """  snakemake --cores all --config 'dataset={"mirrors": ["~/datasets/mnist"]}'""",
        ]
    )


@pytest.mark.parametrize(
    ("mirrors", "public"),
    [
        (["/local", "https://s.example/m/"], "https://s.example/m/"),
        (["/local"], "https://storage.googleapis.com/cvdf-datasets/mnist/"),
    ],
)
def test_the_hand_fetch_uses_the_first_public_mirror_or_the_canonical_one(mirrors, public):
    spec = FileSpec("test_labels", "a.gz", "2" * 64, 1)
    message = failure_message("mnist", {"a.gz": [(mirrors[0], ["x"])]}, [spec], mirrors)
    assert f"  curl -fLO {public}a.gz\n" in message


def test_an_https_mirror_is_opened_as_a_url_with_our_user_agent(monkeypatch):
    import io

    import gradlanes.data.fetch as fetch

    seen = []

    class Response(io.BytesIO):
        headers = {"Content-Length": "3"}

    def urlopen(request, timeout):
        seen.append((request.full_url, request.get_header("User-agent"), timeout))
        return Response(b"abc")

    monkeypatch.setattr(fetch.urllib.request, "urlopen", urlopen)
    for url in ("https://s.example/m/a.gz", "http://h.example/a.gz", "file:///x/a.gz"):
        stream, length = fetch._open_source(url, 7.5)
        assert (stream.read(), length) == (b"abc", 3)
    assert seen == [
        ("https://s.example/m/a.gz", USER_AGENT, 7.5),
        ("http://h.example/a.gz", USER_AGENT, 7.5),
        ("file:///x/a.gz", USER_AGENT, 7.5),
    ]


def test_one_file_fetched_alone_into_a_folder_that_does_not_exist_yet(
    mirror_server, dataset_config, tmp_path
):
    spec = specs(dataset_config, ("test_labels",))[0]
    target = tmp_path / "a" / "b"
    fetched = fetch_file(spec, [mirror_server.mirror("good")], target, FAST)
    assert fetched.path == str(target / spec.name) and (target / spec.name).is_file()


def test_one_try_means_one_request(mirror_server, dataset_config, tmp_path):
    spec = specs(dataset_config, ("test_labels",))[0]
    before = mirror_server.requests_for("short", spec.name)
    with pytest.raises(DownloadError) as caught:
        fetch_dataset("mnist", [spec], [mirror_server.mirror("short")], tmp_path, FetchPolicy(2, 1, 0.0))
    assert mirror_server.requests_for("short", spec.name) - before == 1
    assert "attempt 2" not in str(caught.value)
