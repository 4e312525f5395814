"""The JSON Schemas of the result (gpunode.validate/v1) and of report.json
(gpunode.report/v1), src/gpunode/data/schemas: what the producers write is valid, a document
missing a required key is not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

import gpunode  # noqa: E402
from gpunode.report import build  # noqa: E402

from ..validate.fakes import mig_result as validate_mig_result  # noqa: E402
from ..validate.fakes import result as validate_result  # noqa: E402
from .synthetic import cluster, large_cluster, mig_result, write_mig_cluster  # noqa: E402

SCHEMAS = Path(gpunode.__file__).parent / "data" / "schemas"
NAMES = ("validate-v1.schema.json", "report-v1.schema.json")


def _validator(name: str):
    docs = {n: json.loads((SCHEMAS / n).read_text()) for n in NAMES}
    for doc in docs.values():
        jsonschema.Draft202012Validator.check_schema(doc)
    resources = [(n, referencing.Resource.from_contents(d)) for n, d in docs.items()]
    resources += [(d["$id"], referencing.Resource.from_contents(d)) for d in docs.values()]
    registry = referencing.Registry().with_resources(resources)
    return jsonschema.Draft202012Validator(docs[name], registry=registry)


@pytest.fixture(scope="module")
def result_schema():
    return _validator("validate-v1.schema.json")


@pytest.fixture(scope="module")
def report_schema():
    return _validator("report-v1.schema.json")


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_schemas_ship_with_the_package():
    pyproject = (Path(__file__).parents[3] / "pyproject.toml").read_text()
    assert '"data/schemas/*.json"' in pyproject
    for n in NAMES:
        assert json.loads((SCHEMAS / n).read_text())["$schema"].endswith("/draft/2020-12/schema")


def test_validates_own_results_are_valid(result_schema):
    """The result as gpunode.validate.model writes it (validate's unit tests' results)."""
    for r in (validate_result(), validate_mig_result()):
        doc = json.loads(json.dumps(r.to_dict()))
        assert _errors(result_schema, doc) == []


def test_synthetic_results_are_valid(result_schema):
    docs = [d for d in cluster().values() if "schema" in d] + [mig_result(broken=2)]
    docs += list(large_cluster(8, 2).values())
    for doc in docs:
        if "schema" in doc:
            assert _errors(result_schema, doc) == [], doc["node"]


def test_a_report_built_from_them_is_valid_with_and_without_changes(tmp_path, report_schema):
    model = build.model_from([str(write_mig_cluster(tmp_path / "r"))])
    doc = json.loads(build.render_all(model)["report.json"])
    assert _errors(report_schema, doc) == []
    previous = tmp_path / "prev"
    previous.mkdir()
    (previous / "report.json").write_bytes(build.render_all(model)["report.json"])
    changed = build.compare(model, str(previous))
    assert _errors(report_schema, json.loads(build.render_all(changed)["report.json"])) == []
    # changes per check and GPU: the MIG device fixed, the T4's GPU 1 failing again
    (tmp_path / "r" / "sim-a100-mig.json").write_text(json.dumps(mig_result(broken=None)))
    changed = build.compare(build.model_from([str(tmp_path / "r")]), str(previous))
    doc = json.loads(build.render_all(changed)["report.json"])
    assert [e["change"] for e in doc["changes"]["failures"]] == ["resolved"]
    assert doc["nodes"][0]["age_s"] is not None
    assert _errors(report_schema, doc) == []


@pytest.mark.parametrize("key", ["node", "schema", "checks", "started", "summary"])
def test_a_result_missing_a_required_key_is_invalid(result_schema, key):
    doc = validate_result().to_dict()
    del doc[key]
    assert f"'{key}' is a required property" in "\n".join(_errors(result_schema, doc))


def test_a_result_with_a_bad_check_is_invalid(result_schema):
    doc = validate_result().to_dict()
    bad = copy.deepcopy(doc)
    del bad["checks"][1]["status"]
    assert any(e.startswith("checks/1:") for e in _errors(result_schema, bad))
    bad = copy.deepcopy(doc)
    bad["checks"][0]["status"] = "ok"
    assert any("checks/0/status" in e for e in _errors(result_schema, bad))


@pytest.mark.parametrize("key", ["nodes", "summary", "generated"])
def test_a_report_missing_a_required_key_is_invalid(tmp_path, report_schema, key):
    model = build.model_from([str(write_mig_cluster(tmp_path / "r"))])
    doc = json.loads(build.render_all(model)["report.json"])
    del doc[key]
    assert f"'{key}' is a required property" in "\n".join(_errors(report_schema, doc))
    doc = json.loads(build.render_all(model)["report.json"])
    del doc["nodes"][0]["checks"][0]["mig"]
    assert any(e.startswith("nodes/0/checks/0:") for e in _errors(report_schema, doc))
