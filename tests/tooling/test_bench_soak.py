"""bench/soak.py's report of what the run ran with: autovacuum's settings, the server's
naptime among them, kept in its JSON and drawn again from it."""

import json
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
