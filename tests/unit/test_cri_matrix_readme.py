"""README's "Kubernetes nodes" strategy table is the CRI matrix's data rendered
(tests/integration/cri_matrix.yaml, run by tests/integration/test_cri_matrix.py): edit the data
and run `python -m tests.integration.cri_matrix --write-readme`, never the table by hand."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.integration import cri_matrix as cm


def test_readme_table_is_the_matrix_rendered():
    readme = cm.README.read_text()
    assert readme.count(cm.BEGIN) == 1 and readme.count(cm.END) == 1
    block = readme[readme.index(cm.BEGIN) : readme.index(cm.END) + len(cm.END)]
    assert block == cm.readme_block(cm.load()), (
        "README's strategy table differs from tests/integration/cri_matrix.yaml: run "
        "`python -m tests.integration.cri_matrix --write-readme`"
    )


def test_every_cell_has_one_outcome():
    matrix = cm.load()
    cells = matrix.cells()
    assert len(cells) == len(matrix.pods) * 3 * 3 * 2  # releases x setups x security modes
    assert {matrix.rule(c)["get"] for c in cells} <= set(cm.OUTCOMES)


def test_first_matching_rule_wins():
    matrix = cm.load()
    rule = matrix.rule(cm.Cell("envvar-uuid", "trixie", "runc", "open"))
    assert (rule["get"], rule.get("setup")) == ("none", "runc")
    assert matrix.rule(cm.Cell("envvar-uuid", "trixie", "nvidia", "secure"))["get"] == "none"
    assert matrix.rule(cm.Cell("envvar-uuid", "trixie", "nvidia", "open"))["get"] == "allocated"
    assert matrix.rule(cm.Cell("cdi-cri", "bookworm", "nvidia", "open"))["get"] == "none"
    assert matrix.rule(cm.Cell("cdi-cri", "forky", "runc", "open"))["get"] == "allocated"


def _data():
    return yaml.safe_load(cm.DATA.read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["pods"]["envvar-uuid"].update(colour=1), "pods.envvar-uuid: unknown key 'colour'"),
        (lambda d: d["pods"]["cdi-cri"]["expect"].append({"get": "none", "setup": "runc"}),
         "pods.cdi-cri.expect: the last rule must have no condition"),
        (lambda d: d["pods"]["cdi-cri"]["expect"].insert(0, {"get": "some"}),
         "pods.cdi-cri.expect[0].get: 'some'; accepted: allocated, all, none, nodes, error"),
        (lambda d: d["pods"]["cdi-cri"]["expect"].insert(0, {"get": "none", "containerd": "1.5"}),
         "pods.cdi-cri.expect[0].containerd: '1.5'; accepted: 1.6, 1.7, 2.1"),
        (lambda d: d["pods"]["cdi-cri"]["expect"].insert(0, {"get": "error"}),
         "pods.cdi-cri.expect[0]: an error needs `text` and `at`"),
        (lambda d: d["pods"]["cdi-cri"]["plugin"].update(strategy="env"),
         "pods.cdi-cri.plugin.strategy: 'env'; accepted: envvar, volume-mounts"),
    ],
)  # fmt: skip
def test_bad_data_is_one_line_naming_it(edit, message):
    data = copy.deepcopy(_data())
    edit(data)
    with pytest.raises(cm.MatrixError) as err:
        cm.Matrix(data)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_security_modes_are_what_gpunode_writes_for_kubernetes():
    """The matrix's `secure` is what `gpunode runtime setup --kubernetes` writes, `open` what
    it writes with --kubernetes-insecure-envvar."""
    from gpunode.runtime import config

    modes = cm.load().security
    assert modes["secure"] == dict(config.KUBERNETES_SETTINGS)
    assert modes["open"] == {**dict(config.KUBERNETES_SETTINGS), config.INSECURE_KEY: True}
