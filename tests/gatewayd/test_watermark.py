"""gatewayd's watermark: its rules (`gatewayd.watermark`), its file and `Progress`, and
`[mattermost] catch_up_s`."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from boxmaker.core.errors import ConfigError, StartupError
from boxmaker.gatewayd.config import load_config
from boxmaker.gatewayd.mm_model import Post
from boxmaker.gatewayd.watermark import (
    MAX_BYTES,
    MAX_RECENT,
    Resume,
    Watermark,
    WatermarkError,
    decode_watermark,
    encode_watermark,
)
from boxmaker.gatewayd.watermark_file import Progress, WatermarkFile

MARGIN = 5000
A, B, C, ROOT = ("a" * 26, "b" * 26, "c" * 26, "r" * 26)
NOW = 10_000_000_000


def post(post_id: str, create_at: int, root_id: str = "") -> Post:
    return Post(
        id=post_id, channel_id="d" * 26, user_id="u" * 26, create_at=create_at, root_id=root_id
    )


# --- the rules ------------------------------------------------------------------------


def test_taking_moves_the_newest_up_never_back_and_keeps_the_margin() -> None:
    mark = Watermark().taken(A, 100_000, A, MARGIN).taken(B, 90_000, ROOT, MARGIN)
    assert mark.newest_ms == 100_000
    assert dict(mark.recent) == {A: 100_000}  # B is more than the margin before the newest
    assert dict(mark.in_flight) == {A: A, B: ROOT}
    edge = mark.taken(C, 100_000 - MARGIN, C, MARGIN)
    assert dict(edge.recent) == {A: 100_000, C: 100_000 - MARGIN}


def test_recent_is_bounded_the_oldest_dropped_first() -> None:
    mark = Watermark()
    for n in range(MAX_RECENT + 5):
        mark = mark.taken(f"{n:026d}", 1000 + n, f"{n:026d}", 10**9)
    assert len(mark.recent) == MAX_RECENT
    assert f"{0:026d}" not in mark.recent
    assert f"{MAX_RECENT + 4:026d}" in mark.recent


def test_a_finished_turn_leaves_in_flight_and_a_start_clears_them_all() -> None:
    mark = Watermark().taken(A, 1, A, MARGIN).taken(B, 2, ROOT, MARGIN)
    assert dict(mark.finished(A).in_flight) == {B: ROOT}
    assert dict(mark.resumed().in_flight) == {}
    assert mark.resumed().recent == mark.recent


LOADED = Watermark(NOW - 60_000, {A: NOW - 60_000, B: NOW - 62_000}, {})


@pytest.mark.parametrize(
    ("post_id", "create_at", "answered"),
    [
        pytest.param(C, NOW - 30_000, True, id="newer-than-the-mark"),
        pytest.param(A, NOW - 60_000, False, id="taken-at-the-newest"),
        pytest.param(B, NOW - 62_000, False, id="taken-in-the-margin"),
        pytest.param(C, NOW - 61_000, True, id="late-commit-in-the-margin"),
        pytest.param(C, NOW - 60_000 - MARGIN, True, id="at-the-margin's-edge"),
        pytest.param(C, NOW - 60_000 - MARGIN - 1, False, id="before-the-margin"),
    ],
)
def test_what_a_restart_answers(post_id: str, create_at: int, answered: bool) -> None:
    resume = Resume.after(LOADED, now_ms=NOW, catch_up_s=3600, margin_ms=MARGIN)
    assert resume.answers(post_id, create_at) is answered


def test_nothing_older_than_catch_up_s_is_answered() -> None:
    old = Watermark(NOW - 7_200_000, {}, {})
    resume = Resume.after(old, now_ms=NOW, catch_up_s=3600, margin_ms=MARGIN)
    assert resume.since_ms == NOW - 3_600_000
    assert not resume.answers(C, NOW - 3_600_001)
    assert resume.answers(C, NOW - 3_600_000)
    nothing = Resume.after(old, now_ms=NOW, catch_up_s=0, margin_ms=MARGIN)
    assert nothing.since_ms == NOW
    assert not nothing.answers(C, NOW - 1)


def test_without_a_mark_there_is_no_catch_up() -> None:
    resume = Resume.after(None, now_ms=NOW, catch_up_s=3600, margin_ms=MARGIN)
    assert resume.since_ms is None
    assert resume.answers(C, 1)  # the stream delivers only what comes after the start
    recent = Resume.after(LOADED, now_ms=NOW, catch_up_s=3600, margin_ms=MARGIN)
    assert recent.since_ms == LOADED.newest_ms


# --- the file's format ----------------------------------------------------------------


def test_a_mark_round_trips() -> None:
    mark = Watermark(123, {A: 120}, {B: ROOT})
    data = encode_watermark(mark)
    assert data == (
        b'{"in_flight":{"' + B.encode() + b'":"' + ROOT.encode() + b'"},"newest_ms":123,'
        b'"recent":{"' + A.encode() + b'":120},"version":1}\n'
    )
    assert decode_watermark(data) == mark


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b'{"version": 1, "newest_ms": ', id="cut-short"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(b'{"version":2,"newest_ms":1,"recent":{},"in_flight":{}}', id="version"),
        pytest.param(b'{"version":1,"newest_ms":-1,"recent":{},"in_flight":{}}', id="negative"),
        pytest.param(b'{"version":1,"newest_ms":"1","recent":{},"in_flight":{}}', id="a-string"),
        pytest.param(b'{"version":1,"newest_ms":true,"recent":{},"in_flight":{}}', id="a-bool"),
        pytest.param(b'{"version":1,"newest_ms":1,"recent":{"x":1},"in_flight":{}}', id="bad-id"),
        pytest.param(b'{"version":1,"newest_ms":1,"recent":{},"in_flight":{},"x":0}', id="extra"),
        pytest.param(b'{"version":1,"newest_ms":1,"recent":{}}', id="missing"),
        pytest.param(b" " * (MAX_BYTES + 1), id="too-large"),
    ],
)
def test_a_damaged_file_is_refused(data: bytes) -> None:
    with pytest.raises(WatermarkError):
        decode_watermark(data)


# --- the file -------------------------------------------------------------------------


def test_no_file_is_no_mark_and_the_directory_is_made_private(tmp_path: Path) -> None:
    file = WatermarkFile(tmp_path / "gateway")
    assert file.load() is None
    assert stat.S_IMODE((tmp_path / "gateway").stat().st_mode) == 0o700


def test_a_saved_mark_loads_back_and_only_its_owner_reads_it(tmp_path: Path) -> None:
    file = WatermarkFile(tmp_path)
    file.save(Watermark(5, {A: 5}, {}))
    assert file.load() == Watermark(5, {A: 5}, {})
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["watermark.json"]  # no temporary left


def test_a_damaged_file_is_warned_about_by_name_and_is_no_mark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = WatermarkFile(tmp_path)
    file.path.write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING):
        assert file.load() is None
    (record,) = caplog.records
    assert "event=watermark_damaged" in record.getMessage()
    assert str(file.path) in record.getMessage()


def test_a_linked_file_stops_the_start(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(encode_watermark(Watermark(5, {}, {})))
    (tmp_path / "gateway").mkdir()
    file = WatermarkFile(tmp_path / "gateway")
    os.symlink(elsewhere, file.path)
    with pytest.raises(StartupError, match="cannot read the watermark"):
        file.load()


# --- Progress -------------------------------------------------------------------------


def test_progress_saves_a_post_before_its_turn_and_skips_one_taken_before(
    tmp_path: Path,
) -> None:
    file = WatermarkFile(tmp_path)
    resume = Resume.after(LOADED, now_ms=NOW, catch_up_s=3600, margin_ms=MARGIN)
    progress = Progress(file, resume, LOADED)
    assert not progress.take(post(A, NOW - 60_000))
    assert progress.take(post(C, NOW - 1000, root_id=ROOT))
    on_disk = file.load()
    assert on_disk is not None
    assert dict(on_disk.in_flight) == {C: ROOT}
    progress.finish(C)
    on_disk = file.load()
    assert on_disk is not None
    assert dict(on_disk.in_flight) == {}
    assert C in on_disk.recent


def test_a_post_that_cannot_be_recorded_is_not_taken(tmp_path: Path) -> None:
    file = WatermarkFile(tmp_path)
    progress = Progress(
        file, Resume.after(None, now_ms=NOW, catch_up_s=0, margin_ms=MARGIN), Watermark()
    )
    (tmp_path / "watermark.json.tmp").mkdir()  # the atomic write cannot make its temporary
    with pytest.raises(IsADirectoryError):
        progress.take(post(C, NOW))
    assert progress.mark == Watermark()
    with pytest.raises(StartupError, match="cannot write the watermark"):
        progress.save()


# --- the setting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("-1", "greater than or equal to 0", id="negative"),
        pytest.param("604801", "less than or equal to 604800", id="past-a-week"),
        pytest.param('"3600"', "valid integer", id="a-string"),
        pytest.param("1.5", "valid integer", id="a-float"),
    ],
)
def test_a_bad_catch_up_s_is_refused(tmp_path: Path, value: str, problem: str) -> None:
    config = tmp_path / "gatewayd.toml"
    config.write_text(f"[mattermost]\ncatch_up_s = {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mattermost\.catch_up_s") as raised:
        load_config(config, {})
    assert problem in str(raised.value)


def test_catch_up_s_is_an_hour_unless_set(tmp_path: Path) -> None:
    assert load_config(None, {}).mattermost.catch_up_s == 3600
    config = tmp_path / "gatewayd.toml"
    config.write_text("[mattermost]\ncatch_up_s = 0\n", encoding="utf-8")
    assert load_config(config, {}).mattermost.catch_up_s == 0
