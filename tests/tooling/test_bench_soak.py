"""bench/soak.py's report of what the run ran with: autovacuum's settings, the server's
naptime among them, kept in its JSON and drawn again from it."""

import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest
from django.db import connection

from tests.support.bench_modules import load_bench_module

soak = load_bench_module("soak")


def run(**fields: object) -> object:
    sample = soak.Sample(15.0, 1746.0, 30.0, 60.0, 0, 1, 2, 3, 7.5, 0.05, 12, None, "", False)
    defaults = {"rate": 1746.0, "calibrated": None, "minutes": 1.0, "hold_at": 5.0}
    return soak.Run(**{**defaults, "hold": 0.0, "autovacuum": True, **fields}, samples=[sample])


def test_the_soak_names_the_servers_naptime_beside_the_tables_autovacuum_settings() -> None:
    label = soak.autovacuum_label(run(naptime="10s"))
    assert label == "the tables' own (migration 0019), naptime 10s"
    assert soak.autovacuum_label(run(autovacuum=False)) == "the server's defaults"


def test_a_soaks_json_keeps_the_naptime_and_a_run_from_before_it_loads(tmp_path: Path) -> None:
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(asdict(run(naptime="10s"))))
    assert soak.load(path).naptime == "10s"
    before = asdict(run())
    del before["naptime"]
    path.write_text(json.dumps(before))
    loaded = soak.load(path)
    assert loaded.naptime == "" and loaded.samples[0].scan_buffers == 12
    assert "naptime" not in soak.draw(loaded)


@pytest.mark.django_db
def test_the_soak_reads_the_servers_naptime() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the soak runs on PostgreSQL")
    naptime = soak.server_setting("autovacuum_naptime")
    assert naptime.endswith(("s", "min")) and naptime[0].isdigit()


def sampled(at: float, claims: float, p50: float | None) -> object:
    return soak.Sample(
        at, claims, p50, 2 * p50 if p50 else None, 0, 1, 2, 3, 7.5, 0.05, 12, None, "", False
    )


def test_the_minutes_against_the_first_leave_out_the_warm_up(capsys) -> None:
    samples = [
        sampled(-30.0, 900.0, 99.0),  # the warm-up: not the first minute
        sampled(0.0, 900.0, 99.0),  # the warm-up's last half minute
        sampled(30.0, 1000.0, 20.0),
        sampled(60.0, 1000.0, 22.0),  # a sample covers the half minute before it: minute 0's
        sampled(90.0, 1000.0, 21.0),
        sampled(120.0, 600.0, 25.0),  # minute 1 drains 800 a second: it wore
        sampled(150.0, 1000.0, None),
        sampled(180.0, 1000.0, 30.0),
    ]
    measured = soak.Run(
        rate=1000.0,
        calibrated=None,
        minutes=3,
        hold_at=5,
        hold=0,
        autovacuum=True,
        samples=samples,
        warmup=0.5,
    ).measured()
    assert [sample.at for sample in measured] == [30.0, 60.0, 90.0, 120.0, 150.0, 180.0]
    minutes = soak.by_minute(measured)
    assert minutes[0]["p50"] == 21.0  # 20 and 22, the samples at 30 s and 60 s
    assert minutes[1]["p50"] == 23.0 and minutes[2]["p50"] == 30.0
    soak.report(soak.Run(1000.0, None, 3, 5, 0, True, samples=samples, warmup=0.5))
    out = capsys.readouterr().out
    assert "load 1,000 jobs/s for 3 minutes after 0.5 of warm-up" in out
    # A lower drain wore, as a higher latency did.
    assert "claims/s: minute 0 1,000.0; within 10 % in 1 of 2, more than 10 % worse in 1" in out
    assert "p50: minute 0 21.0; within 10 % in 1 of 2, more than 10 % worse in 1" in out


def test_a_warm_up_is_kept_in_the_json_and_left_out_of_the_chart(tmp_path: Path) -> None:
    warm = run(warmup=2.0)
    warm.samples.insert(0, sampled(-60.0, 5.0, 12345.0))
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(asdict(warm)))
    loaded = soak.load(path)
    assert loaded.warmup == 2.0 and len(loaded.samples) == 2
    drawn = soak.draw(loaded)
    assert "after 2 of warm-up" in drawn
    assert "no snapshot held" in drawn and "#f3e3d3" not in drawn  # --hold 0: nothing shaded
    lines = re.findall(r'points="([^"]*)"', drawn)
    assert lines and all(len(points.split()) == 1 for points in lines)  # the measured sample


def test_the_soak_names_the_drain_it_calibrated_with_the_producer_beside(
    tmp_path: Path, capsys
) -> None:
    loaded = run(calibrated=6000.0, calibrated_loaded=4200.0, rate=3360.0)
    soak.report(loaded)
    said = capsys.readouterr().out
    assert "(6,000 jobs/s drained when calibrated, 4,200 kept up with beside the producer)" in said
    path = tmp_path / "soak.json"
    path.write_text(json.dumps(asdict(loaded)))
    assert soak.load(path).calibrated_loaded == 4200.0
    soak.report(run(calibrated=6000.0))  # a run without it says nothing of it
    assert "beside" not in capsys.readouterr().out
