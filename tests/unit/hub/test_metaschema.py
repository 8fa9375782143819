"""meta.json's record, its JSON Schema and its readers: the schema kept in the package is
the one the typed record makes, every key is described, each version has its reader, and a
version from a newer wallflame is refused in one line."""

from __future__ import annotations

import json
import shutil
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from wallflame.cli import cli
from wallflame.errors import EXIT_INPUT, InputError
from wallflame.metaextra import Extra, PassedExtra, SavedExtra
from wallflame.metaschema import SCHEMA_PATH, field_docs, schema, schema_json
from wallflame.rundir import (
    META,
    META_READERS,
    META_VERSION,
    CollectOptions,
    RunMeta,
    SavedLoss,
    SavedProfile,
    SnapshotStats,
    Window,
    read_meta,
)

OLD = FIXTURES / "rundir" / "v0-mix"
#: ``meta.json`` as version 1 writes it: ``OLD``'s ``raw/`` finished again.
V1 = FIXTURES / "rundir" / "v1-mix"


def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def test_the_kept_schema_is_the_records() -> None:
    """Regenerate with ``python -m wallflame.metaschema > wallflame/schema/meta-1.schema.json``
    after changing the record (and raise ``META_VERSION`` if a key changed or went)."""
    assert SCHEMA_PATH.read_text() == schema_json()
    jsonschema.Draft202012Validator.check_schema(schema())
    assert SCHEMA_PATH.name == f"meta-{META_VERSION}.schema.json"
    # shipped with the package
    assert (files("wallflame") / "schema" / SCHEMA_PATH.name).is_file()


@pytest.mark.parametrize("record", [RunMeta, CollectOptions, Window, SnapshotStats,
                                    SavedProfile, SavedLoss, SavedExtra, PassedExtra])
def test_every_key_has_a_docstring(record: type) -> None:
    fields = set(record.__annotations__)
    assert fields - {"problems"} <= set(field_docs(record)), record


def test_saved_and_passed_keys_do_not_overlap() -> None:
    saved, passed = set(SavedExtra.__annotations__), set(PassedExtra.__annotations__)
    assert not saved & passed
    assert set(Extra.__optional_keys__) == saved | passed


def test_a_version_0_file_reads_through_its_reader_and_maps_to_version_1() -> None:
    data = json.loads((OLD / META).read_text())
    assert "version" not in data
    meta = read_meta(OLD)
    assert meta.version == 0 and meta.options.freq_hz == 99
    assert meta.profile["extra"]["offcpu_source"] == "sched"
    assert meta.machine == {} and meta.plan == {}  # keys version 1 added, at their defaults
    # the v0 file is version 1's keys: with its version, it holds to version 1's schema
    assert list(_validator().iter_errors({**data, "version": 1})) == []
    assert META_READERS[0] is not META_READERS[META_VERSION]


def test_a_version_1_file_reads_whole_through_the_record() -> None:
    data = json.loads((V1 / META).read_text())
    meta = read_meta(V1)
    assert meta.version == 1 and meta.to_json() == data  # every key held, none lost
    assert list(_validator().iter_errors(data)) == []
    assert set(data["profile"]["extra"]) <= set(SavedExtra.__annotations__)


def test_a_written_record_holds_to_the_schema() -> None:
    d = RunMeta().to_json()
    assert d["version"] == META_VERSION
    assert list(_validator().iter_errors(d)) == []
    assert list(_validator().iter_errors({**d, "version": META_VERSION + 1})) != []


def _with_version(tmp_path: Path, version: Any) -> Path:
    run = tmp_path / "run"
    shutil.copytree(OLD, run, ignore=shutil.ignore_patterns("raw"))
    data = json.loads((run / META).read_text())
    (run / META).write_text(json.dumps({**data, "version": version}))
    return run


def test_a_newer_version_is_refused_in_one_line_with_the_fix(tmp_path: Path) -> None:
    run = _with_version(tmp_path, META_VERSION + 1)
    with pytest.raises(InputError, match="format version 2, this wallflame reads up to 1") as e:
        read_meta(run)
    assert e.value.fix == "upgrade wallflame"
    r = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "r.html")])
    assert r.exit_code == EXIT_INPUT
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "upgrade wallflame" in r.stderr


@pytest.mark.parametrize("version", ["1", -1, True, None])
def test_a_version_no_wallflame_writes_is_refused(tmp_path: Path, version: Any) -> None:
    with pytest.raises(InputError, match="format version"):
        read_meta(_with_version(tmp_path, version))
