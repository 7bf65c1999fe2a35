"""The per-activation splitter: linear work and bounded memory whatever the output's shape."""

from __future__ import annotations

import random

from gateway.runtime import SENTINEL
from gateway.runtime.logsplit import LINE_OVERHEAD, Part, StreamSplitter, merge

END = (SENTINEL + "\n").encode()


def feed_in_chunks(splitter: StreamSplitter, data: bytes, seed: int = 1) -> int:
    rng = random.Random(seed)
    start = chunks = 0
    while start < len(data):
        size = rng.randint(1, 1 << 16)
        splitter.feed(data[start : start + size], 0.0)
        start += size
        chunks += 1
    return chunks


def test_many_short_lines_cost_linear_copying() -> None:
    """200k lines in random chunks: every byte is copied a bounded number of times (the old
    ``buffer.split(b"\\n", 1)`` loop copied the whole rest of the buffer for every line)."""
    lines = [f"line {i}".encode() for i in range(200_000)]
    data = b"\n".join(lines) + b"\n" + END + b"next activation\n"
    splitter = StreamSplitter(None)
    chunks = feed_in_chunks(splitter, data)
    assert splitter.copied <= 2 * len(data) + chunks * len(END)
    (part,) = splitter.done
    assert [text for _, text in part.lines] == [line.decode() for line in lines]
    assert not part.truncated
    assert [text for _, text in splitter.flush(0.0).lines] == ["next activation"]


def test_over_the_limit_the_rest_is_dropped_up_to_the_sentinel() -> None:
    limit = 1000
    line = b"y" * 64
    data = (line + b"\n") * 100_000 + b"tail" + END + b"after\n" + END
    splitter = StreamSplitter(limit)
    chunks = feed_in_chunks(splitter, data, seed=2)
    # dropped bytes are not copied: only the kept lines and a sentinel's worth per chunk
    assert splitter.copied <= 2 * limit + chunks * 3 * len(END) < len(data) // 100
    first, second = splitter.done
    assert first.truncated and first.size <= limit
    assert len(first.lines) == limit // (LINE_OVERHEAD + len(line))
    assert [text for _, text in second.lines] == ["after"] and not second.truncated


def test_one_endless_line_holds_no_more_than_a_sentinel() -> None:
    splitter = StreamSplitter(100)
    splitter.feed(b"a short line\n", 0.0)
    for _ in range(2000):  # 16 MB without a newline
        splitter.feed(b"z" * 8192, 0.0)
        assert len(splitter._partial) < len(END)
    splitter.feed(END[:10], 0.0)  # the sentinel arrives split over two chunks
    splitter.feed(END[10:] + b"clean\n", 0.0)
    (part,) = splitter.done
    assert part.truncated and [text for _, text in part.lines] == ["a short line"]
    assert [text for _, text in splitter.current.lines] == ["clean"]


def test_sentinel_at_every_split_point_while_dropping() -> None:
    for cut in range(len(END) + 1):
        splitter = StreamSplitter(0)
        splitter.feed(b"dropped\n" + END[:cut], 0.0)
        splitter.feed(END[cut:] + b"kept?\n", 0.0)
        assert len(splitter.done) == 1, cut
        assert splitter.done[0].truncated and splitter.current.truncated  # limit 0: all go


def test_merge_applies_the_limit_across_both_streams_and_marks_it() -> None:
    out = Part([(1.0, "o" * 10), (3.0, "p" * 10)], size=2 * (LINE_OVERHEAD + 10))
    err = Part([(2.0, "e" * 10)], size=LINE_OVERHEAD + 10)
    lines = merge([("stdout", out), ("stderr", err)], 2 * (LINE_OVERHEAD + 10), 5.0, 4096)
    assert [line.split(" ", 1)[1] for line in lines] == [
        "stdout: " + "o" * 10,
        "stderr: " + "e" * 10,
        "stderr: Logs were truncated because the total bytes size exceeds the limit of 4096 bytes.",
    ]
    assert merge([("stdout", out), ("stderr", err)], None, 5.0)[-1].endswith("p" * 10)
